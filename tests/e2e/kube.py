"""Helpers for gpugate's end-to-end tests on a real control plane (``shared/kube/cluster``).

Plain synchronous code over the official ``kubernetes`` client, usable from pytest fixtures
and from ``bench/apiserver_bench.py``:

- :class:`Cluster`: ``cluster up/down/node/crds`` of ``shared/kube`` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler on 127.0.0.1; no kubelet);
- :class:`Gpugate`: ``gpugate serve`` as a subprocess against that cluster (live topology),
  with its certificates, policy file, log file and ``/metrics``;
- :func:`webhook_configurations`: the project's own ``deploy/base/webhooks.yaml`` with each
  ``clientConfig`` pointed at a URL on this machine; :func:`register` / :func:`unregister`;
- :class:`Api`: raw requests through the client that return status, body and the API server's
  ``Warning`` headers (what kubectl prints) instead of raising.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBE = Path(os.environ.get("GPUGATE_KUBE") or Path(__file__).resolve().parents[3] / "shared" / "kube")
WEBHOOKS_YAML = REPO / "deploy" / "base" / "webhooks.yaml"

# The default policy's node pool key (label and taint), workload usage label and GPU product label.
USAGE_KEY = "maip.mxsf.io/node.usage"
WORKLOAD_KEY = "maip.mxsf.io/usage"
PRODUCT_KEY = "nvidia.com/gpu.product"
PRODUCT = "NVIDIA-H20"
GPU = "nvidia.com/gpu"
# Every test's nodes carry this label with a value of their own; workloads select on it.
TEST_KEY = "e2e.gpugate.io/group"


def unavailable() -> str | None:
    """Why the control plane cannot run here, or None."""
    if not (KUBE / "cluster").is_file():
        return f"no {KUBE}/cluster"
    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        if not (KUBE / f"{binary}.xz").is_file():
            return f"no {binary}.xz in {KUBE}"
    for tool in ("curl", "openssl", "xz", "setsid", "bash"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    if not (os.environ.get("ETCD") or shutil.which("etcd") or shutil.which("apt-get")):
        return "no etcd, and no apt-get to install Debian's etcd-server"
    return None


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; that value, or the last one."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ClusterError(RuntimeError):
    pass


class Cluster:
    """One ``shared/kube/cluster`` control plane with its state in ``directory``."""

    def __init__(self, directory: Path, kube: Path = KUBE) -> None:
        self.dir = Path(directory)
        self.kube = kube
        self.kubeconfig = self.dir / "kubeconfig"
        self.running = False

    def _run(self, *args: str, timeout: float = 300,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kube / "cluster"), *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})})

    def up(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        result = self._run("up", str(self.dir))
        if result.returncode:
            raise ClusterError(f"cluster up failed:\n{result.stderr[-3000:]}")
        self.running = True

    def down(self, remove_binaries: bool = True) -> None:
        self._run("down", str(self.dir), timeout=120)
        self.running = False
        if remove_binaries:
            shutil.rmtree(self.dir / "bin", ignore_errors=True)

    def crds(self, *names: str) -> float:
        """Install ``crds/NAME.yaml(.xz)`` and wait until Established; the seconds it took."""
        started = time.monotonic()
        # on a loaded 2-core machine a large batch of CRDs takes longer than the script's
        # default 60 s to become Established: wait up to 180 s (ours times out at 240 s)
        result = self._run("crds", str(self.dir), *names, timeout=240,
                           env={"CLUSTER_CRDS_WAIT_SECS": "180"})
        if result.returncode:
            raise ClusterError(f"cluster crds {' '.join(names)} failed:\n{result.stderr[-3000:]}")
        return time.monotonic() - started

    def node(self, name: str, labels: Mapping[str, str] | None = None, *,
             capacity: Mapping[str, str] | None = None, taints: Sequence[str] = ()) -> None:
        """Create (or update) a fake Ready node; taints as ``key=value:Effect``."""
        args = ["node", str(self.dir), name, *(f"{k}={v}" for k, v in dict(labels or {}).items())]
        if capacity:
            args += ["--capacity", ",".join(f"{k}={v}" for k, v in dict(capacity).items())]
        for taint in taints:
            args += ["--taint", taint]
        result = self._run(*args, timeout=60)
        if result.returncode:
            raise ClusterError(f"cluster node {name} failed:\n{result.stderr[-2000:]}")

    def gpu_node(self, name: str, group: str, pool: str = "training", gpus: int = 8,
                 extra_labels: Mapping[str, str] | None = None, extra_taints: Sequence[str] = (),
                 cpu: str = "64", product_taint: bool = True) -> None:
        """A GPU node laid out per the README's convention: label and NoSchedule taint of its
        usage pool and of its GPU product, plus ``TEST_KEY=group``."""
        labels = {USAGE_KEY: pool, PRODUCT_KEY: PRODUCT, TEST_KEY: group, **dict(extra_labels or {})}
        taints = [f"{USAGE_KEY}={pool}:NoSchedule"]
        if product_taint:
            taints.append(f"{PRODUCT_KEY}={PRODUCT}:NoSchedule")
        self.node(name, labels, capacity={GPU: str(gpus), "cpu": cpu}, taints=[*taints, *extra_taints])

    def client(self) -> Any:
        import kubernetes

        return kubernetes.config.new_client_from_config(str(self.kubeconfig))


# -- the webhook -----------------------------------------------------------------------------

def make_certs(directory: Path) -> tuple[Path, Path, str]:
    """``gpugate certs --out DIR --ip 127.0.0.1``: (tls.crt, tls.key, base64 caBundle)."""
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-m", "gpugate", "certs", "--out", str(directory),
                             "--ip", "127.0.0.1"], capture_output=True, text=True, cwd=REPO, timeout=60)
    if result.returncode:
        raise RuntimeError(f"gpugate certs failed: {result.stderr}")
    ca_bundle = base64.b64encode((directory / "ca.crt").read_bytes()).decode()
    return directory / "tls.crt", directory / "tls.key", ca_bundle


class Gpugate:
    """``gpugate serve`` against the cluster, in a subprocess; log in ``directory/serve.log``.

    ``/metrics`` is served on a plain-HTTP port of its own (``--metrics-port``: a free one
    unless ``extra`` names it). ``certs``: reuse another instance's ``(tls.crt, tls.key,
    caBundle)`` (several replicas behind one address), else ``gpugate certs`` makes new ones."""

    def __init__(self, directory: Path, kubeconfig: Path, policy: Mapping[str, Any] | None = None,
                 *extra: str, certs: tuple[Path, Path, str] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert, self.key, self.ca_bundle = certs or make_certs(self.dir / "certs")
        self.ca_path = self.cert.parent / "ca.crt"
        self.policy_path = self.dir / "policy.yaml"
        self.policy_path.write_text(yaml.safe_dump(dict(policy or {
            "apiVersion": "gpugate.io/v1alpha1", "kind": "Policy"})))
        self.port = free_port()
        self.metrics_port = 0 if "--metrics-port" in extra else free_port()
        metrics = [] if "--metrics-port" in extra else ["--metrics-port", str(self.metrics_port)]
        self.log_path = self.dir / "serve.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--tls-cert", str(self.cert), "--tls-key", str(self.key), "--kubeconfig", str(kubeconfig),
             # the CRDs installed after start-up (LATER_CRDS) are watched within seconds
             "--config", str(self.policy_path), "--crd-retry-seconds", "2", *metrics, *extra],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)
        self._ssl = ssl.create_default_context(cafile=str(self.ca_path))

    @property
    def metrics_url(self) -> str:
        port = self.metrics_port
        if not port:  # --metrics-port 0 in extra: the port it picked is in its start-up log line
            match = re.search(r"metrics on http://[^:/]+:(\d+)/metrics", self.log(100_000))
            assert match, f"no metrics port in the log:\n{self.log()}"
            port = self.metrics_port = int(match.group(1))
        return f"http://127.0.0.1:{port}/metrics"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, context=self._ssl, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpugate serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                return self.get("/readyz", timeout=1)[0] == 200
            except OSError:
                return False
        if not wait_until(ready, timeout, 0.2):
            raise RuntimeError(f"gpugate serve not ready within {timeout:g} s:\n{self.log()}")

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            assert response.status == 200, response.status
            return str(response.read().decode())

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        from prometheus_client.parser import text_string_to_metric_families

        out = []
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                out.append((sample.name, dict(sample.labels), float(sample.value)))
        return out

    def counters(self) -> Counters:
        return Counters(self.samples())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


@dataclass
class Counters:
    """A snapshot of gpugate's metrics; ``sum`` adds the samples whose labels match."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def sum(self, name: str, **labels: str | Iterable[str]) -> float:
        total = 0.0
        for sample_name, sample_labels, value in self.samples:
            if sample_name != name:
                continue
            if all(sample_labels.get(k) == v if isinstance(v, str) else sample_labels.get(k) in set(v)
                   for k, v in labels.items()):
                total += value
        return total

    def reviews(self, **labels: str | Iterable[str]) -> float:
        return self.sum("gpugate_reviews_total", **labels)

    def findings(self, **labels: str | Iterable[str]) -> float:
        return self.sum("gpugate_review_findings_total", **labels)

    def topology(self, kind: str) -> float:
        return self.sum("gpugate_topology_objects", kind=kind)

    def __sub__(self, other: Counters) -> Delta:
        return Delta(self, other)


@dataclass
class Delta:
    after: Counters
    before: Counters

    def reviews(self, **labels: str | Iterable[str]) -> float:
        return self.after.reviews(**labels) - self.before.reviews(**labels)

    def findings(self, **labels: str | Iterable[str]) -> float:
        return self.after.findings(**labels) - self.before.findings(**labels)


def webhook_configurations(ca_bundle: str, mutate_url: str | None,
                           validate_url: str | None) -> list[dict[str, Any]]:
    """The project's ``deploy/base/webhooks.yaml`` with each ``clientConfig`` replaced by
    ``{url, caBundle}`` (rules, namespaceSelector, failurePolicy, timeouts kept). A None URL
    leaves that configuration out."""
    documents = [d for d in yaml.safe_load_all(WEBHOOKS_YAML.read_text()) if d]
    out = []
    for document in documents:
        url = mutate_url if document["kind"] == "MutatingWebhookConfiguration" else validate_url
        if url is None:
            continue
        document = copy.deepcopy(document)
        for hook in document["webhooks"]:
            hook["clientConfig"] = {"url": url, "caBundle": ca_bundle}
        out.append(document)
    return out


def register(api_client: Any, configurations: Iterable[Mapping[str, Any]]) -> None:
    """Create or replace the webhook configurations."""
    import kubernetes

    api: Any = kubernetes.client.AdmissionregistrationV1Api(api_client)
    for configuration in configurations:
        body = dict(configuration)
        name = body["metadata"]["name"]
        mutating = body["kind"] == "MutatingWebhookConfiguration"
        read = (api.read_mutating_webhook_configuration if mutating
                else api.read_validating_webhook_configuration)
        create = (api.create_mutating_webhook_configuration if mutating
                  else api.create_validating_webhook_configuration)
        replace = (api.replace_mutating_webhook_configuration if mutating
                   else api.replace_validating_webhook_configuration)
        try:
            current = read(name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            create(body)
        else:
            body = copy.deepcopy(body)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            replace(name, body)


def unregister(api_client: Any, name: str = "gpugate", mutating: bool = True,
               validating: bool = True) -> None:
    import kubernetes

    api = kubernetes.client.AdmissionregistrationV1Api(api_client)
    calls = ([api.delete_mutating_webhook_configuration] if mutating else []) + (
        [api.delete_validating_webhook_configuration] if validating else [])
    for delete in calls:
        try:
            delete(name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise


# -- raw API requests with warnings --------------------------------------------------------

_WARNING = re.compile(r'^\s*(\d{3})\s+(\S+)\s+"((?:[^"\\]|\\.)*)"')


def parse_warning(header: str) -> str:
    """The text of one ``Warning: 299 - "text"`` header value (RFC 7234 quoting undone)."""
    try:  # http.client decodes header bytes as latin-1; the API server sends UTF-8
        header = header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        pass
    match = _WARNING.match(header)
    if not match:
        return header
    return re.sub(r"\\(.)", r"\1", match.group(3))


@dataclass
class Response:
    status: int
    body: Any
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)

    def __repr__(self) -> str:
        return f"Response({self.status}, warnings={self.warnings!r}, message={self.message!r})"


def _headers_warnings(headers: Any) -> list[str]:
    if headers is None:
        return []
    values = headers.getlist("Warning") if hasattr(headers, "getlist") else (
        [headers["Warning"]] if "Warning" in headers else [])
    return [parse_warning(v) for v in values]


def resource_path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = base + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


PLURALS = {
    "Pod": "pods", "Deployment": "deployments", "StatefulSet": "statefulsets", "ReplicaSet": "replicasets",
    "Job": "jobs", "CronJob": "cronjobs", "PodGroup": "podgroups", "Queue": "queues",
    "PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "MPIJob": "mpijobs", "XGBoostJob": "xgboostjobs",
    "PaddleJob": "paddlejobs", "JAXJob": "jaxjobs", "RayCluster": "rayclusters", "RayJob": "rayjobs",
    "RayService": "rayservices", "ElasticJob": "elasticjobs", "Namespace": "namespaces", "Node": "nodes",
    "Event": "events",
}
CLUSTER_SCOPED = {"Queue", "Namespace", "Node"}


class Api:
    """Requests through the official client's ``ApiClient`` that never raise on an HTTP error
    and return the API server's warnings (the ``Warning`` headers kubectl prints)."""

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    def request(self, method: str, path: str, body: Any = None, *, dry_run: bool = False,
                content_type: str = "application/json", query: Sequence[tuple[str, str]] = ()) -> Response:
        params = list(query) + ([("dryRun", "All")] if dry_run else [])
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, header_params, serialized, post_params = self.client.param_serialize(
            method, path, query_params=params, header_params=headers, body=body,
            auth_settings=["BearerToken"])
        response = self.client.call_api(method_, url, header_params=header_params, body=serialized,
                                        post_params=post_params)
        data = response.read()
        try:
            parsed: Any = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return Response(int(response.status), parsed, _headers_warnings(response.headers))

    # object-level conveniences ------------------------------------------------------------
    def path_of(self, obj: Mapping[str, Any], *, name: bool = True, subresource: str | None = None) -> str:
        kind = obj["kind"]
        namespace = None if kind in CLUSTER_SCOPED else obj["metadata"].get("namespace", "default")
        return resource_path(obj["apiVersion"], PLURALS[kind], namespace,
                             obj["metadata"]["name"] if name else None, subresource)

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Response:
        return self.request("POST", self.path_of(obj, name=False), obj, dry_run=dry_run)

    def get(self, obj: Mapping[str, Any]) -> Response:
        return self.request("GET", self.path_of(obj))

    def read(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        response = self.get(obj)
        assert response.status == 200, response
        return dict(response.body)

    def put(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Response:
        return self.request("PUT", self.path_of(obj), obj, dry_run=dry_run)

    def patch(self, obj: Mapping[str, Any], patch: Any, *, merge: bool = True, subresource: str | None = None,
              dry_run: bool = False) -> Response:
        content_type = "application/merge-patch+json" if merge else "application/json-patch+json"
        return self.request("PATCH", self.path_of(obj, subresource=subresource), patch, dry_run=dry_run,
                            content_type=content_type)

    def delete(self, obj: Mapping[str, Any], grace_seconds: int | None = None) -> Response:
        query = [("gracePeriodSeconds", str(grace_seconds))] if grace_seconds is not None else []
        return self.request("DELETE", self.path_of(obj), query=query)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        response = self.request("GET", resource_path(api_version, PLURALS[kind], namespace), query=query)
        assert response.status == 200, response
        # list items come without apiVersion and kind: put them back, so they can be sent again
        items = response.body.get("items") or []
        return [{"apiVersion": api_version, "kind": kind, **item} for item in items]


def canonical(value: Any) -> str:
    """Byte-stable JSON of a value (key order normalised) for "unchanged" comparisons."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
