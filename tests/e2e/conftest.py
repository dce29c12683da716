"""Fixtures of the end-to-end suite: one real control plane (``shared/kube/cluster``) and one
``gpugate serve`` for the whole session, the project's own webhook configurations registered
against it, and a fresh namespace per test.

Set ``GPUGATE_KUBE`` to another ``shared/kube`` directory; set ``GPUGATE_E2E_REQUIRED`` to make
an unavailable control plane a failure instead of a skip (CI does, see ``.ci/run``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kube import (
    GPU,
    PRODUCT,
    PRODUCT_KEY,
    WORKLOAD_KEY,
    Api,
    Cluster,
    ClusterError,
    Gpugate,
    register,
    unavailable,
    unregister,
    wait_until,
    webhook_configurations,
)

PROBE_NAMESPACE = "gpugate-e2e-probe"
IGNORE_LABEL = "gpugate.io/ignore"
# Policy: the defaults; only the topology may be older before feasibility gives up (GG406),
# so that a slow 2-core machine does not turn a verdict into "unknown"; and Kueue leaves out the
# namespaces labelled KUEUE_OPT_OUT besides its default ones (a selector on a label the live
# topology must watch: tests/e2e/test_kinds_2026.py).
KUEUE_OPT_OUT = "e2e.gpugate.io/kueue-unmanaged"
POLICY = {"apiVersion": "gpugate.io/v1alpha1", "kind": "Policy", "feasibility": {"staleAfterSeconds": 600},
          "queues": {"kueueManagedJobsNamespaceSelector": {"matchExpressions": [
              {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
               "values": ["kube-system", "kueue-system"]},
              {"key": KUEUE_OPT_OUT, "operator": "DoesNotExist"}]}}}

# CRDs the tests need: Volcano first (gpugate watches its Queues and PodGroups from the start),
# the others in the background while the webhook starts.
FIRST_CRDS = ("volcano",)
LATER_CRDS = ("training-operator", "kuberay", "dlrover", "jobset", "lws", "trainer", "kai-scheduler", "kueue",
              "wg-policy")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


class Session:
    """Everything the tests share: the cluster, the webhook, clients and timings."""

    def __init__(self, cluster: Cluster, gate: Gpugate, api: Api, api_client: Any) -> None:
        self.cluster = cluster
        self.gate = gate
        self.api = api
        self.api_client = api_client
        self.timings: dict[str, float] = {}
        self._crds_thread: threading.Thread | None = None
        self._crds_error: BaseException | None = None

    # -- webhook registration -------------------------------------------------------------
    @property
    def mutate_url(self) -> str:
        return f"{self.gate.url}/mutate"

    @property
    def validate_url(self) -> str:
        return f"{self.gate.url}/validate"

    def register(self, mutate_url: str | None = "", validate_url: str | None = "") -> None:
        """Register the project's webhooks ("" = gpugate's own URL, None = leave it out) and
        wait until the API server calls them."""
        mutate = self.mutate_url if mutate_url == "" else mutate_url
        validate = self.validate_url if validate_url == "" else validate_url
        if mutate is None:
            unregister(self.api_client, mutating=True, validating=False)
        if validate is None:
            unregister(self.api_client, mutating=False, validating=True)
        register(self.api_client, webhook_configurations(self.gate.ca_bundle, mutate, validate))
        want_mutation = mutate == self.mutate_url
        want_validation = validate == self.validate_url
        assert wait_until(lambda: self.probe(PROBE_NAMESPACE) == (want_mutation, want_validation), 20), (
            f"webhook registration not in force: probe says {self.probe(PROBE_NAMESPACE)}")

    def unregister(self) -> None:
        unregister(self.api_client)
        assert wait_until(lambda: self.probe(PROBE_NAMESPACE) == (False, False), 20)

    def probe(self, namespace: str) -> tuple[bool, bool]:
        """(mutated, validated) for a server-side dry run in ``namespace``: a GPU Pod must come
        back with gpugate's usage affinity; a Deployment with a GPU group size that is not a
        number must be refused by gpugate (GG201), which only gpugate does."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "probe", "namespace": namespace, "labels": {WORKLOAD_KEY: "training"}},
               "spec": {"containers": [{"name": "c", "image": "busybox",
                                        "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}],
                        "nodeSelector": {PRODUCT_KEY: PRODUCT}}}
        created = self.api.create(pod, dry_run=True)
        mutated = created.ok and bool((created.body.get("spec") or {}).get("affinity"))
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "probe", "namespace": namespace},
                      "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "probe"}},
                               "template": {"metadata": {"labels": {"app": "probe"},
                                                         "annotations": {
                                                             "metax-tech.com/gpu-group-size": "many"}},
                                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
        refused = self.api.create(deployment, dry_run=True)
        validated = refused.status == 403 and "GG201" in refused.message
        return mutated, validated

    # -- CRDs ---------------------------------------------------------------------------
    def install_later_crds(self) -> None:
        def run() -> None:
            try:
                self.timings["crds " + " ".join(LATER_CRDS)] = self.cluster.crds(*LATER_CRDS)
            except BaseException as exc:  # noqa: BLE001 - reported by wait_crds
                self._crds_error = exc
        self._crds_thread = threading.Thread(target=run, name="e2e-crds", daemon=True)
        self._crds_thread.start()

    def wait_crds(self) -> None:
        if self._crds_thread is not None:
            self._crds_thread.join(240)
        if self._crds_error is not None:
            pytest.fail(f"installing CRDs failed: {self._crds_error}")

    # -- topology -----------------------------------------------------------------------
    def wait_nodes_synced(self, timeout: float = 20.0) -> None:
        """Until gpugate's topology holds as many nodes as the API server."""
        want = len(self.api.list("v1", "Node"))
        assert wait_until(lambda: self.gate.counters().topology("Node") >= want, timeout), (
            f"gpugate sees {self.gate.counters().topology('Node')} nodes, the API server {want}")


@pytest.fixture(scope="session")
def control_plane() -> None:
    """Skip when shared/kube cannot run here, or fail when ``GPUGATE_E2E_REQUIRED`` is set."""
    why = unavailable()
    if why:
        if os.environ.get("GPUGATE_E2E_REQUIRED"):
            pytest.fail(f"real Kubernetes control plane required (GPUGATE_E2E_REQUIRED): {why}")
        pytest.skip(f"real Kubernetes control plane unavailable: {why}")


@pytest.fixture(scope="package")
def e2e(control_plane: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The control plane, gpugate serving against it and its webhooks registered; shared by
    every test of tests/e2e and stopped after the last one (not kept for the rest of the run)."""
    root = tmp_path_factory.mktemp("e2e")
    cluster = Cluster(root / "kube")
    started = time.monotonic()
    try:
        cluster.up()
    except ClusterError as exc:
        cluster.down()
        pytest.fail(str(exc))
    gate: Gpugate | None = None
    try:
        timings = {"cluster up": time.monotonic() - started}
        timings["crds " + " ".join(FIRST_CRDS)] = cluster.crds(*FIRST_CRDS)
        api_client = cluster.client()
        api = Api(api_client)
        gate = Gpugate(root / "gpugate", cluster.kubeconfig, POLICY)
        session = Session(cluster, gate, api, api_client)
        session.timings.update(timings)
        session.install_later_crds()
        t0 = time.monotonic()
        gate.wait_ready()
        session.timings["gpugate ready"] = time.monotonic() - t0
        assert api.create({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": PROBE_NAMESPACE}}).ok
        t0 = time.monotonic()
        session.register()
        session.timings["webhooks in force"] = time.monotonic() - t0
        yield session
        print("\ne2e timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in session.timings.items()))
    finally:
        if gate is not None:
            gate.stop()
        cluster.down()


@pytest.fixture(scope="package")
def crds(e2e: Session) -> Session:
    """The session, once the later CRDs (``LATER_CRDS``) are Established."""
    e2e.wait_crds()
    return e2e


def _namespace(e2e: Session, request: pytest.FixtureRequest, labels: dict[str, str]) -> Iterator[str]:
    name = f"e2e-{request.node.name.replace('_', '-').lower()[:40].rstrip('-')}-{uuid.uuid4().hex[:5]}"
    name = name.replace("[", "-").replace("]", "")
    created = e2e.api.create({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name, "labels": labels}})
    assert created.ok, created
    yield name
    with contextlib.suppress(Exception):
        # bound, unfinished pods would hang in Terminating (no kubelet): remove them at once
        for pod in e2e.api.list("v1", "Pod", name):
            e2e.api.delete(pod, grace_seconds=0)
        e2e.api.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def namespace(e2e: Session, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (deleted afterwards without waiting)."""
    yield from _namespace(e2e, request, {})


@pytest.fixture
def ignored_namespace(e2e: Session, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace labelled ``gpugate.io/ignore``: the API server does not call gpugate
    there, as if gpugate were not installed yet (see :func:`ungate`)."""
    yield from _namespace(e2e, request, {IGNORE_LABEL: "true"})
