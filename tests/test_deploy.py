"""deploy/: every overlay renders with kustomize, every object validates against the Kubernetes
OpenAPI schemas, and the safety properties hold (webhook rules = the kind table, read-only
RBAC, restricted pods, exclusions). Ends with an end-to-end run of ``gpugate serve`` behind the
generated certificates, reached the way the API server reaches it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from policies.config import DEFAULT_POLICY, policy_from_data
from policies.kinds import KINDS
from webhook.certs import cert_pem, issued_by, load_cert, service_dns_names, write_cert_set

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
NAMESPACE = "gpugate-system"
SERVICE = "gpugate"
KUBECTL = shutil.which("kubectl")
ALLOWED_VERBS = {"get", "list", "watch"}
TOPOLOGY_RESOURCES = {("", "nodes"), ("", "pods"), ("", "namespaces"), ("scheduling.volcano.sh", "queues"),
                      ("scheduling.volcano.sh", "podgroups"), ("topology.volcano.sh", "hypernodes"),
                      ("scheduling.sigs.k8s.io", "elasticquotatrees"), ("kueue.x-k8s.io", "localqueues"),
                      ("kueue.x-k8s.io", "clusterqueues"), ("kueue.x-k8s.io", "cohorts"),
                      ("kueue.x-k8s.io", "resourceflavors"), ("kueue.x-k8s.io", "topologies"),
                      ("kueue.x-k8s.io", "admissionchecks"),
                      ("scheduling.run.ai", "queues"), ("trainer.kubeflow.org", "trainingruntimes"),
                      ("trainer.kubeflow.org", "clustertrainingruntimes"), ("scheduling.k8s.io", "workloads"),
                      ("scheduling.k8s.io", "podgroups"), ("resource.k8s.io", "deviceclasses"),
                      ("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "resourceclaims"),
                      ("resource.k8s.io", "resourceclaimtemplates")}
Obj = dict[str, Any]

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (kustomize) is not installed")


def kustomize(directory: Path) -> list[Obj]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/ with certificates generated into the self-signed overlay, as the README
    tells users to do (the real overlay's certs/ is git-ignored and absent in a checkout), plus
    an overlay that adds the fail-closed component."""
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(DEPLOY, root / "deploy", ignore=shutil.ignore_patterns("certs"))
    write_cert_set(root / "deploy" / "overlays" / "self-signed" / "certs", SERVICE, NAMESPACE)
    fail_closed = root / "deploy" / "overlays" / "fail-closed-test"
    fail_closed.mkdir()
    (fail_closed / "kustomization.yaml").write_text(
        "resources: [../self-signed]\ncomponents: [../../components/fail-closed]\n")
    # The README's example overlay, taken from the README itself so the documentation is tested.
    mine = root / "deploy" / "overlays" / "my-cluster"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(readme_overlay())
    (mine / "policy.yaml").write_text(yaml.safe_dump(MY_POLICY))
    return root / "deploy"


MY_POLICY: Obj = {"apiVersion": "gpugate.io/v1alpha1", "kind": "Policy", "feasibility": {"mode": "warn"}}
README_OVERLAY_MARKER = "# deploy/overlays/my-cluster/kustomization.yaml"


def readme_overlay() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(README_OVERLAY_MARKER)
    return text[start:text.index("```", start)]


OVERLAYS = ("base", "overlays/self-signed", "overlays/cert-manager", "overlays/fail-closed-test",
            "overlays/my-cluster")
FAIL_CLOSED = {"overlays/fail-closed-test", "overlays/my-cluster"}


@pytest.fixture(scope="module")
def rendered(workdir: Path) -> dict[str, list[Obj]]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) is not installed")
    return {name: kustomize(workdir / name) for name in OVERLAYS}


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(objs: list[Obj]) -> list[tuple[str, Obj]]:
    return [(o["kind"], hook) for o in objs
            if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for hook in o["webhooks"]]


# -- rendering and schemas ---------------------------------------------------------------

@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates_against_openapi(rendered: dict[str, list[Obj]], overlay: str) -> None:
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    objs = rendered[overlay]
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Service",
            "Deployment", "PodDisruptionBudget", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration"} <= kinds
    checked = 0
    for obj in objs:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue    # a CRD: not in the Kubernetes OpenAPI schemas (checked by hand below)
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 10


def test_schema_validation_would_catch_a_broken_object() -> None:
    """The validator used above does reject a wrong field (so passing means something)."""
    import kubernetes_validate

    bad = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "x"},
           "webhooks": [{"name": "v.x.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                         "clientConfig": {"service": {"name": "x", "namespace": "y"}},
                         "timeoutSeconds": "three"}]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


# -- webhook configurations --------------------------------------------------------------

# `kubectl scale` writes the scale subresource of exactly the kinds whose KindSpec.scale_replicas
# is set (Deployments, StatefulSets, ReplicaSets; PyTorchJob, PaddleJob and JAXJob Workers).
SCALED = {(k.group, k.resource) for k in KINDS if k.scale_replicas}


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_webhook_rules_cover_exactly_the_kind_table(rendered: dict[str, list[Obj]], overlay: str) -> None:
    assert all(k.resource for k in KINDS), "every row of policies/kinds.py needs its plural resource"
    assert SCALED and SCALED <= {(k.group, k.resource) for k in KINDS}
    hooks = webhooks(rendered[overlay])
    assert sorted(kind for kind, _ in hooks) == ["MutatingWebhookConfiguration",
                                                 "ValidatingWebhookConfiguration"]
    for kind, hook in hooks:
        # cluster-scoped kinds without pod templates (Volcano Queues) have nothing to inject:
        # /validate alone sees them
        expected = {(k.group, k.resource, "Cluster" if k.cluster_scoped else "Namespaced") for k in KINDS
                    if kind == "ValidatingWebhookConfiguration" or not k.cluster_scoped or k.pod_sets}
        covered: set[tuple[str, str, str]] = set()
        scales: set[tuple[str, str]] = set()
        for rule in hook["rules"]:
            assert rule["apiVersions"] == ["*"]
            resources = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
            subresources = {r.partition("/")[2] for _, r in resources}
            assert len(subresources) == 1, f"{kind}: objects and subresources mixed in one rule: {rule}"
            if subresources == {""}:
                assert sorted(rule["operations"]) == ["CREATE", "UPDATE"], (kind, rule)
                covered |= {(g, r, rule.get("scope")) for g, r in resources}
            else:
                # a scale is only ever an UPDATE (kubectl scale, an autoscaler), never a CREATE
                assert subresources == {"scale"} and rule["operations"] == ["UPDATE"], (kind, rule)
                scales |= {(g, r.partition("/")[0]) for g, r in resources}
        assert covered == expected, (f"{kind}: missing {sorted(expected - covered)}, "
                                     f"extra {sorted(covered - expected)}")
        # Only /validate judges a scale (the mutating webhook has nothing to add to one).
        wanted = SCALED if kind == "ValidatingWebhookConfiguration" else set()
        assert scales == wanted, (f"{kind} scale rules: missing {sorted(wanted - scales)}, "
                                  f"extra {sorted(scales - wanted)}")


# The worst case a create waits for gpugate: the mutating webhook (reinvocationPolicy: IfNeeded,
# so twice) and the validating one, each until its timeout. Documented in the README and at the
# top of deploy/base/webhooks.yaml.
WORST_CASE_SECONDS = 4


@needs_kubectl
def test_timeouts_add_up_to_the_documented_worst_case(rendered: dict[str, list[Obj]]) -> None:
    hooks = dict(webhooks(rendered["base"]))
    mutate = hooks["MutatingWebhookConfiguration"]
    validate = hooks["ValidatingWebhookConfiguration"]
    calls = 2 if mutate.get("reinvocationPolicy") == "IfNeeded" else 1
    assert calls == 2
    total = calls * mutate["timeoutSeconds"] + validate["timeoutSeconds"]
    assert total == WORST_CASE_SECONDS
    # a scale-up reads its target with a 1 s timeout, inside the validating webhook's time
    assert validate["timeoutSeconds"] > 1
    sum_text = (f"{mutate['timeoutSeconds']} + {mutate['timeoutSeconds']} + {validate['timeoutSeconds']}"
                f" = {total} s")
    for documented in (ROOT / "README.md", DEPLOY / "base" / "webhooks.yaml"):
        assert sum_text in " ".join(documented.read_text().split()), f"{documented.name} lacks {sum_text!r}"
    readme = (ROOT / "README.md").read_text()
    assert "timeoutSeconds: 3" not in readme and "(3 s)" not in readme


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_webhook_safety_settings(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objs = rendered[overlay]
    own_namespace = one(objs, "Namespace")["metadata"]["name"]
    service = one(objs, "Service")
    ports = {p["port"] for p in service["spec"]["ports"]}
    for kind, hook in webhooks(objs):
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert 1 <= hook["timeoutSeconds"] <= 5
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == (service["metadata"]["name"], own_namespace)
        assert ref.get("port", 443) in ports
        expressions = hook["namespaceSelector"]["matchExpressions"]
        not_in = [e for e in expressions
                  if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"]
        assert len(not_in) == 1 and {"kube-system", "kube-public", own_namespace} <= set(not_in[0]["values"])
        assert {"key": "gpugate.io/ignore", "operator": "DoesNotExist"} in expressions
        if kind == "MutatingWebhookConfiguration":
            assert ref["path"] == "/mutate"
            assert hook["failurePolicy"] == "Ignore"
            assert hook["reinvocationPolicy"] == "IfNeeded"
        else:
            assert ref["path"] == "/validate"
            assert hook["failurePolicy"] == ("Fail" if overlay in FAIL_CLOSED else "Ignore")
    # Everything namespaced lives in gpugate's own namespace (the NotIn entry above).
    for obj in objs:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding") \
                and not obj["kind"].endswith("WebhookConfiguration"):
            assert obj["metadata"]["namespace"] == own_namespace, obj["kind"]
    # The webhook's own namespace must not be gated by the webhook, whatever the selector says.
    assert "gpugate.io/ignore" in one(objs, "Namespace")["metadata"]["labels"]


@needs_kubectl
def test_self_signed_ca_bundle_is_the_generated_ca(rendered: dict[str, list[Obj]], workdir: Path) -> None:
    objs = rendered["overlays/self-signed"]
    certs = workdir / "overlays" / "self-signed" / "certs"
    ca = load_cert(certs / "ca.crt")
    for _, hook in webhooks(objs):
        bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
        assert bundle == cert_pem(ca)
    secret = one(objs, "Secret")
    assert secret["type"] == "kubernetes.io/tls" and secret["metadata"]["namespace"] == NAMESPACE
    served = load_cert_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    assert issued_by(served, ca)
    from cryptography import x509

    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f'{one(objs, "Service")["metadata"]["name"]}.{one(objs, "Namespace")["metadata"]["name"]}.svc' \
        in sans.get_values_for_type(x509.DNSName)
    assert secret["metadata"]["name"] == tls_secret_name(objs)
    # base has no caBundle at all (overlays provide it); never an empty or placeholder one
    assert all("caBundle" not in hook["clientConfig"] for _, hook in webhooks(rendered["base"]))


def load_cert_bytes(pem: bytes) -> Any:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem)


@needs_kubectl
def test_cert_manager_overlay(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["overlays/cert-manager"]
    own_namespace = one(objs, "Namespace")["metadata"]["name"]
    certificate = one(objs, "Certificate")
    issuer = one(objs, "Issuer")
    assert certificate["apiVersion"] == issuer["apiVersion"] == "cert-manager.io/v1"
    spec = certificate["spec"]
    assert spec["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert set(spec["dnsNames"]) == set(service_dns_names(one(objs, "Service")["metadata"]["name"],
                                                          own_namespace))
    assert spec["secretName"] == tls_secret_name(objs)
    ref = f'{certificate["metadata"]["namespace"]}/{certificate["metadata"]["name"]}'
    assert certificate["metadata"]["namespace"] == issuer["metadata"]["namespace"] == own_namespace
    for o in objs:
        if o["kind"].endswith("WebhookConfiguration"):
            assert o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == ref
    assert not any(o["kind"] == "Secret" for o in objs)   # cert-manager writes it


# -- RBAC and the Deployment ---------------------------------------------------------------

@needs_kubectl
def test_cluster_role_is_read_only_and_exactly_the_topology(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["base"]
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    granted: set[tuple[str, str, str]] = set()
    for role in roles:
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= ALLOWED_VERBS, rule
            assert "*" not in rule.get("resources", []) and "*" not in rule.get("apiGroups", [])
            assert not rule.get("nonResourceURLs")
            granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                        for v in rule["verbs"]}
    # list/watch: exactly the topology; get: the topology and the parents of the scale
    # subresources the validating webhook judges (a scale-up reads the object it scales)
    for verb in ("list", "watch"):
        assert {(g, r) for g, r, v in granted if v == verb} == TOPOLOGY_RESOURCES, verb
    assert {(g, r) for g, r, v in granted if v == "get"} == TOPOLOGY_RESOURCES | SCALED
    binding = one(objs, "ClusterRoleBinding")
    deployment = one(objs, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["roleRef"]["name"] == one(objs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


@needs_kubectl
def test_cluster_role_matches_what_the_live_watch_lists(rendered: dict[str, list[Obj]]) -> None:
    """The ClusterRole follows the watch's own resource table, so a resource added there without
    RBAC (the watch would get 403 in a cluster) fails here."""
    watch = pytest.importorskip("webhook.kube")
    watched = {(r.group, r.plural) for r in watch.RESOURCES}
    granted = {(g, r) for o in rendered["base"] if o["kind"] == "ClusterRole"
               for rule in o["rules"] if {"list", "watch"} <= set(rule["verbs"])
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == watched


def tls_secret_name(objs: list[Obj]) -> str:
    volumes = one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    return next(v["secret"]["secretName"] for v in volumes if "secret" in v)


def flag(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert len(values) == 1, f"{name} given {len(values)} times in {args}"
    return values[0]


def mounted_from(pod: Obj, container: Obj, path: str) -> Obj:
    """The volume a file path inside the container comes from (a directory mount holding it)."""
    for mount in container["volumeMounts"]:
        if PurePosixPath(path).parent == PurePosixPath(mount["mountPath"]) and "subPath" not in mount:
            return next(v for v in pod["volumes"] if v["name"] == mount["name"])
    raise AssertionError(f"{path} is not in a mounted volume")


@needs_kubectl
def test_deployment_is_restricted_and_wired(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["base"]
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["topologySpreadConstraints"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert not sc.get("privileged")
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    # Probes over HTTPS on the serving port.
    port = next(p for p in container["ports"] if p["name"] == "https")
    assert port["containerPort"] == 8443
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"], get["port"]) == (path, "HTTPS", "https")
    # The arguments point at files that really are mounted from the ConfigMap and the Secret.
    args = container["args"]
    assert args[0] == "serve"
    assert flag(args, "--port") == "8443"
    policy_volume = mounted_from(pod, container, flag(args, "--config"))
    config_map = one(objs, "ConfigMap", policy_volume["configMap"]["name"])
    assert PurePosixPath(flag(args, "--config")).name in config_map["data"]
    for name in ("--tls-cert", "--tls-key"):
        assert "secret" in mounted_from(pod, container, flag(args, name))
    assert PurePosixPath(flag(args, "--tls-cert")).name == "tls.crt"
    assert PurePosixPath(flag(args, "--tls-key")).name == "tls.key"
    # Service and PodDisruptionBudget select these pods.
    service = one(objs, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "https")]
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    namespace = one(objs, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@needs_kubectl
def test_readme_example_overlay(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["overlays/my-cluster"]
    container = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/gpugate:0.1.0"
    (text,) = one(objs, "ConfigMap", "gpugate-policy")["data"].values()
    assert yaml.safe_load(text) == MY_POLICY
    assert policy_from_data(yaml.safe_load(text)).feasibility["mode"] == "warn"


@needs_kubectl
def test_config_map_holds_the_default_policy(rendered: dict[str, list[Obj]]) -> None:
    config_map = one(rendered["base"], "ConfigMap")
    (text,) = config_map["data"].values()
    assert policy_from_data(yaml.safe_load(text), "configmap").data == DEFAULT_POLICY


def test_deployment_flags_exist_in_gpugate_serve() -> None:
    """The flags the Deployment passes are ones ``gpugate serve`` accepts."""
    pytest.importorskip("webhook.cli")
    result = subprocess.run([sys.executable, "-m", "gpugate", "serve", "--help"], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    deployment = next(d for d in yaml.safe_load_all((DEPLOY / "base" / "deployment.yaml").read_text())
                      if d["kind"] == "Deployment")
    for arg in deployment["spec"]["template"]["spec"]["containers"][0]["args"][1:]:
        assert arg.split("=", 1)[0] in result.stdout, arg


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_fail_closed_sheds_to_a_denial(rendered: dict[str, list[Obj]], overlay: str) -> None:
    """Fail-closed refuses an object gpugate did not judge; so does gpugate's own shed answer."""
    args = one(rendered[overlay], "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--overload-answer=deny" in args) == (overlay in FAIL_CLOSED), args


@needs_kubectl
def test_graceful_stop_settings_add_up(rendered: dict[str, list[Obj]]) -> None:
    """preStop sleep + gpugate's drain + the in-flight bound fit in the grace period, and the
    preStop command exists in the image (python:3.11-slim: /bin/sleep; 1.28 has no sleep action)."""
    pod = one(rendered["base"], "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "/bin/sleep"
    pre_stop = float(command[1])
    args = container["args"]
    drain, shutdown = float(flag(args, "--drain-seconds")), float(flag(args, "--shutdown-seconds"))
    assert pre_stop >= 5 and drain > 0 and shutdown >= 2   # a validating call lasts at most 2 s
    assert pre_stop + drain + shutdown < pod["terminationGracePeriodSeconds"]
    assert "python:3.11-slim" in (ROOT / "Dockerfile").read_text()


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base", "overlays/self-signed", "overlays/cert-manager"])
def test_network_policy_admits_only_the_api_server_range_and_the_scraper(
        rendered: dict[str, list[Obj]], overlay: str) -> None:
    objs = rendered[overlay]
    policy = one(objs, "NetworkPolicy", "gpugate")
    pod = one(objs, "Deployment")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8443, "metrics": int(flag(container["args"], "--metrics-port"))}
    webhook_rule, metrics_rule = policy["spec"]["ingress"]
    assert [p["port"] for p in webhook_rule["ports"]] == [ports["https"]]
    (source,) = webhook_rule["from"]
    assert source["ipBlock"]["cidr"] == "0.0.0.0/0" and source["ipBlock"]["except"]  # not the pods
    assert [p["port"] for p in metrics_rule["ports"]] == [ports["metrics"]]
    (scraper,) = metrics_rule["from"]
    assert scraper["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}


# -- Dockerfile ------------------------------------------------------------------------------

def test_dockerfile_is_multi_stage_non_root_and_runs_gpugate() -> None:
    lines = [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    stages = [ln for ln in lines if ln.upper().startswith("FROM ")]
    assert len(stages) >= 2 and all("python:3.11" in s for s in stages)
    users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0", "0:0")
    assert 'ENTRYPOINT ["gpugate"]' in lines
    cmd = next(ln for ln in lines if ln.upper().startswith("CMD "))
    assert json.loads(cmd[4:])[0] == "serve"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "tests"} <= {p.strip("/") for p in ignored}


# -- end to end: gpugate serve behind the generated certificates -----------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_server_context(ca_file: Path) -> ssl.SSLContext:
    """What the API server does with caBundle: trust that CA only, verify the hostname."""
    # With cafile given, the system trust store is not loaded: this CA only.
    return ssl.create_default_context(cafile=str(ca_file))


def https(port: int, path: str, context: ssl.SSLContext, body: bytes | None = None,
          hostname: str = f"{SERVICE}.{NAMESPACE}.svc") -> tuple[int, bytes]:
    """One request to 127.0.0.1:port, TLS-verified as ``hostname`` (the Service's DNS name)."""
    import http.client

    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    # Connect to the loopback address but check the certificate against the Service name.
    conn.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                    server_hostname=hostname)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request("POST" if body is not None else "GET", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


METRICS_PORT = [free_port()]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    pytest.importorskip("webhook.cli", reason="gpugate serve (webhook/cli.py) is not there yet")
    pytest.importorskip("lint.cluster", reason="--cluster FILE (lint/cluster.py) is not there yet")
    certs = tmp_path_factory.mktemp("served-certs")
    write_cert_set(certs, SERVICE, NAMESPACE)
    # No API server here: a static topology, as `gpugate snapshot` would export it.
    cluster = certs / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    port = free_port()
    log = certs / "serve.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpugate", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--metrics-port", str(METRICS_PORT[0]), "--drain-seconds", "0",
             "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
             "--config", str(DEPLOY / "base" / "policy.yaml"), "--cluster", str(cluster)],
            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        context = api_server_context(certs / "ca.crt")
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"gpugate serve exited with {process.returncode}:\n{log.read_text()}")
            try:
                if https(port, "/healthz", context)[0] == 200:
                    break
            except (OSError, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gpugate serve did not answer /healthz within 30 s:\n{log.read_text()}")
            time.sleep(0.1)
        yield port, certs
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def review(obj: Obj, operation: str = "CREATE") -> tuple[str, bytes]:
    uid = str(uuid.uuid4())
    meta = obj.get("metadata", {})
    group, _, version = obj["apiVersion"].rpartition("/")
    body = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
            "namespace": meta.get("namespace", "ml"), "name": meta.get("name", ""),
            "operation": operation, "userInfo": {"username": "e2e"}, "object": obj, "oldObject": None,
            "dryRun": False,
        },
    }
    return uid, json.dumps(body).encode()


CLUSTER: Obj = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": f"gpu-{i}", "labels": {"kubernetes.io/hostname": f"gpu-{i}",
                                                 "nvidia.com/gpu.product": "H100",
                                                 "maip.mxsf.io/node.usage": "training"}},
     "spec": {},
     "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
    for i in range(2)
]}
GOOD_JOB: Obj = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cpu-only", "namespace": "ml"},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
}
# A GPU requested without a limit: the API server would refuse the pods (GG501, an error).
BAD_JOB: Obj = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu-no-limit", "namespace": "ml"},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}}]}}},
}


def test_e2e_health_over_tls_trusting_only_the_generated_ca(served: tuple[int, Path], tmp_path: Path) -> None:
    port, certs = served
    context = api_server_context(certs / "ca.crt")
    # The Deployment's probes over TLS; the Prometheus scrape in plain HTTP on its own port.
    for path in ("/livez", "/healthz", "/readyz"):
        assert https(port, path, context)[0] == 200, path
    assert https(port, "/metrics", context)[0] == 404
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT[0]}/metrics", timeout=10) as response:
        assert response.status == 200 and b"gpugate_review_duration_seconds" in response.read()
    # The certificate is for the Service's names, not for anything else ...
    with pytest.raises(ssl.SSLCertVerificationError):
        https(port, "/healthz", context, hostname="gpugate.other-namespace.svc")
    # ... and a client trusting another CA refuses the server.
    stranger = tmp_path / "stranger"
    write_cert_set(stranger)
    with pytest.raises(ssl.SSLCertVerificationError):
        https(port, "/healthz", api_server_context(stranger / "ca.crt"))


def test_e2e_validate_admission_review(served: tuple[int, Path]) -> None:
    port, certs = served
    context = api_server_context(certs / "ca.crt")
    uid, body = review(GOOD_JOB)
    status, raw = https(port, "/validate", context, body)
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == uid
    assert answer["response"]["allowed"] is True

    uid, body = review(BAD_JOB)
    status, raw = https(port, "/validate", context, body)
    assert status == 200, raw
    response = json.loads(raw)["response"]
    assert response["uid"] == uid
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "GG501" in response["status"]["message"]

    # A malformed review is a 400 with a reason, never a 500.
    status, raw = https(port, "/validate", context, b'{"kind": "AdmissionReview"')
    assert status == 400 and raw


GPU_JOB: Obj = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"template": {"spec": {
        "restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": "H100"},
        "containers": [{"name": "main", "image": "cuda",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
}


def test_e2e_mutate_injects_usage_and_is_idempotent(served: tuple[int, Path]) -> None:
    import jsonpatch

    port, certs = served
    context = api_server_context(certs / "ca.crt")
    uid, body = review(GOOD_JOB)
    status, raw = https(port, "/mutate", context, body)
    assert status == 200, raw
    response = json.loads(raw)["response"]
    assert response["uid"] == uid and response["allowed"] is True

    uid, body = review(GPU_JOB)
    status, raw = https(port, "/mutate", context, body)
    assert status == 200, raw
    response = json.loads(raw)["response"]
    assert response["uid"] == uid and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(GPU_JOB, json.loads(base64.b64decode(response["patch"])))
    pod = patched["spec"]["template"]["spec"]
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms = required["nodeSelectorTerms"]
    assert any(e["key"] == "maip.mxsf.io/node.usage" for t in terms for e in t["matchExpressions"])
    assert {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "H100",
            "effect": "NoSchedule"} in pod["tolerations"]
    # The API server may reinvoke the webhook (reinvocationPolicy: IfNeeded): no second patch.
    status, raw = https(port, "/mutate", context, review(patched)[1])
    assert status == 200 and not json.loads(raw)["response"].get("patch")


# -- README "Install on a cluster", step 3: the install check ---------------------------------

USAGE_KEY, PRODUCT_KEY, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product", "NVIDIA-H20"


def convention_node(name: str, pool: str | None, gpus: int = 0) -> Obj:
    """A node laid out per the README's "Node usage pools": a GPU node carries the label and the
    NoSchedule taint of its pool and of its GPU product; a CPU node is in no pool."""
    labels: dict[str, str] = {"kubernetes.io/hostname": name}
    taints: list[Obj] = []
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if pool is not None:
        labels |= {USAGE_KEY: pool, PRODUCT_KEY: PRODUCT}
        taints = [{"key": USAGE_KEY, "value": pool, "effect": "NoSchedule"},
                  {"key": PRODUCT_KEY, "value": PRODUCT, "effect": "NoSchedule"}]
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints}, "status": {"allocatable": allocatable, "capacity": allocatable}}


def test_install_check_example_is_admitted_under_the_taint_convention() -> None:
    """`kubectl create --dry-run=server -f examples/workloads/valid-pytorchjob-gang.yaml`: the
    mutating webhook's patch, then the validating webhook's verdict on the patched object, with
    the default policy (deploy/base/policy.yaml) on a cluster laid out as the README says."""
    import jsonpatch

    from policies.engine import evaluate
    from policies.findings import Severity
    from policies.topology import ClusterSnapshot, Topology

    text = (ROOT / "README.md").read_text()
    step = text[text.index("**3. Check.**"):]
    assert "kubectl create --dry-run=server -f examples/workloads/valid-pytorchjob-gang.yaml" in step
    policy = policy_from_data(yaml.safe_load((DEPLOY / "base" / "policy.yaml").read_text()), "policy.yaml")
    nodes = [convention_node("gpu-0", "training", 8), convention_node("gpu-1", "training", 8),
             convention_node("gpu-2", "inference", 8), convention_node("cpu-0", None)]
    clusters = [ClusterSnapshot("convention", Topology.from_objects(nodes, policy))]
    job = yaml.safe_load((ROOT / "examples" / "workloads" / "valid-pytorchjob-gang.yaml").read_text())
    mutated = evaluate(job, policy, clusters)
    assert mutated.patch, "the mutating webhook adds the pool affinity and the tolerations"
    stored = jsonpatch.apply_patch(job, mutated.patch)
    verdict = evaluate(stored, policy, clusters)
    errors = [f"{f.rule}: {f.message}" for f in verdict.findings if f.severity == Severity.ERROR]
    assert not errors, errors
    assert not verdict.findings, [f"{f.rule}: {f.message}" for f in verdict.findings]  # not even a warning
    for role in ("Master", "Worker"):
        tolerated = {(t["key"], t.get("value")) for t in
                     stored["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["tolerations"]}
        assert {(USAGE_KEY, "training"), (PRODUCT_KEY, PRODUCT)} <= tolerated
    # and without the product pin it would be refused (GG403): why the example carries the label
    del job["metadata"]["labels"][PRODUCT_KEY]
    bare = evaluate(job, policy, clusters)
    unpinned = evaluate(jsonpatch.apply_patch(job, bare.patch or []), policy, clusters)
    assert "GG403" in {f.rule for f in unpinned.findings if f.severity == Severity.ERROR}


# -- gpugate outside the cluster: clientConfig.url instead of the Service ---------------------

@needs_kubectl
def test_outside_cluster_overlay_points_both_webhooks_at_the_url(tmp_path: Path) -> None:
    import ipaddress

    import kubernetes_validate
    from cryptography import x509

    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("certs"))
    overlay = deploy / "overlays" / "outside-cluster"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    (literal,) = kustomization["configMapGenerator"][0]["literals"]
    address = literal.partition("=")[2]
    host = address.rpartition(":")[0]
    # as the overlay's comment says: `gpugate certs --out .../certs --ip HOST`
    write_cert_set(overlay / "certs", ip_addresses=[host])
    objs = kustomize(overlay)
    base = {o["kind"]: o for o in kustomize(DEPLOY / "base") if o["kind"].endswith("WebhookConfiguration")}
    assert sorted(o["kind"] for o in objs) == ["MutatingWebhookConfiguration",
                                               "ValidatingWebhookConfiguration"]
    ca = cert_pem(load_cert(overlay / "certs" / "ca.crt"))
    for obj in objs:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        (hook,) = obj["webhooks"]
        (original,) = base[obj["kind"]]["webhooks"]
        path = original["clientConfig"]["service"]["path"]
        assert hook["clientConfig"]["url"] == f"https://{address}{path}"
        assert set(hook["clientConfig"]) == {"url", "caBundle"}
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        # everything else as in the base: rules, timeouts, failure policy, namespaces
        assert {k: v for k, v in hook.items() if k != "clientConfig"} == \
            {k: v for k, v in original.items() if k != "clientConfig"}
    # the API server checks the host against the serving certificate's subjectAltName
    served = load_cert(overlay / "certs" / "tls.crt")
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address(host) in sans.get_values_for_type(x509.IPAddress)
