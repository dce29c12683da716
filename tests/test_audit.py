"""``gpugate audit``: which objects are judged, the verdicts, the formats and the reports.

The verdicts themselves come from the feasibility check (property-tested against brute force
elsewhere); what is proven here is what the audit adds: the top of each ownership tree is
judged once, as it is stored (never as gpugate would have patched it), a gang's placed pods
are free for it, and every output says the same thing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from feasibility_helpers import node, pod, snapshot

from policies.audit import Filters, audit, find_subjects
from policies.audit.policyreports import MAX_RESULTS, build_reports
from policies.config import Policy
from policies.engine import evaluate

Obj = dict[str, Any]
SHARED = Path(__file__).resolve().parents[2] / "shared"
GPU = "nvidia.com/gpu"
STAMP = "2026-11-26T07:00:00Z"


def gpu_nodes(count: int, gpus: int = 8) -> list[Obj]:
    return [node(f"n{i}", {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}) for i in range(count)]


def owner(obj: Obj) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}


def job(name: str, gpus: int, parallelism: int = 1, ns: str = "team-a", **meta: Any) -> Obj:
    container = {"name": "main", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": STAMP,
                         **meta},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def pod_of(parent: Obj, index: int, gpus: int, node_name: str | None = None, **extra: Any) -> Obj:
    ns = parent["metadata"].get("namespace", "team-a")
    p = pod(f"{parent['metadata']['name']}-{index}", node_name, {GPU: str(gpus)}, namespace=ns,
            phase="Running" if node_name else "Pending")
    p["spec"]["containers"][0]["resources"]["limits"] = {GPU: str(gpus)}
    p["metadata"].update(uid=f"{parent['metadata']['uid']}-{index}", creationTimestamp=STAMP,
                         ownerReferences=[owner(parent)])
    p.update(extra)
    return p


def run_audit(objects: list[Obj], **kwargs: Any) -> dict[str, Any]:
    """name -> the entry's dict (the JSON shape), for every judged subject."""
    result = audit(objects, snapshot(objects), Policy(), **kwargs)
    return {e.subject.ref.name: e.as_dict() for e in result.entries}


# -- which objects are judged -----------------------------------------------------------------

def test_the_top_of_each_tree_is_judged_once() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "train", "namespace": "ml", "uid": "js"},
              "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": job("t", 8)["spec"] and
                                           {"spec": job("t", 8)["spec"]}}]}}
    child = job("train-w-0", 8, ns="ml")
    child["metadata"]["ownerReferences"] = [owner(jobset)]
    pods = [pod_of(child, i, 8) for i in range(2)]
    daemon = pod("agent", None, {"cpu": "1"}, phase="Pending")
    daemon["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "a",
                                              "uid": "ds", "controller": True}]
    subjects = find_subjects([*gpu_nodes(1), jobset, child, *pods, daemon])
    assert [(s.ref.kind, s.ref.name, s.unscheduled) for s in subjects] == [("JobSet", "train", 2)]
    assert subjects[0].held_by == ["2 pods not scheduled"]


def test_running_pods_of_a_controller_not_listed_are_not_scanned_but_pending_ones_are_judged() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "uid": "rs"}}
    running = pod_of(rs, 0, 1, "n0")
    waiting = pod_of(rs, 1, 16)
    subjects = {s.ref.name: s for s in find_subjects([*gpu_nodes(1), running, waiting])}
    assert list(subjects) == ["web-1-1"] and subjects["web-1-1"].pending


def test_owner_cycles_and_hostile_metadata_do_not_break_the_walk() -> None:
    a = job("a", 1)
    b = job("b", 1)
    a["metadata"]["ownerReferences"] = [owner(b)]
    b["metadata"]["ownerReferences"] = [owner(a)]
    hostile: list[Any] = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": "nope"},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"ownerReferences": "x", "uid": 5}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "c", "ownerReferences": [None, 3]},
         "spec": [], "status": {"conditions": "x"}},
        "not an object", None,
    ]
    result = audit([*gpu_nodes(1), a, b, *hostile], snapshot(gpu_nodes(1)), Policy())
    assert {e.subject.ref.kind for e in result.entries} <= {"Job", "Pod"}
    json.dumps(result.as_dict())                   # every output renders
    json.dumps(list(build_reports(result, 0).values()))


def test_objects_being_deleted_are_not_judged() -> None:
    going = job("going", 16, deletionTimestamp=STAMP)
    assert find_subjects([*gpu_nodes(1), going, pod_of(going, 0, 16)]) == []


def test_a_job_of_a_controller_gpugate_does_not_model_is_judged_as_made_by_hand() -> None:
    workflow_job = job("step", 16)
    workflow_job["metadata"]["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                                    "name": "wf", "uid": "wf", "controller": True}]
    entries = run_audit([*gpu_nodes(2), workflow_job, pod_of(workflow_job, 0, 16)])
    assert entries["step"]["verdict"] == "never"


# -- verdicts ---------------------------------------------------------------------------------

def busy(count: int, half: bool = True) -> list[Obj]:
    """Jobs whose one pod holds all 8 GPUs of node n<i>, for i < count, and (``half``) one
    that holds 4 of node n<count>."""
    out = []
    for i in range(count + half):
        gpus = 4 if i == count else 8
        filler = job(f"busy{i}", gpus)
        out += [filler, pod_of(filler, 0, gpus, f"n{i}")]
    return out


def test_never_waits_and_fits_with_the_reasons_and_the_scheduler_beside_them() -> None:
    too_big, waits, fits = job("too-big", 16), job("waits", 8), job("fits", 1)
    unschedulable = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}],
                     "phase": "Pending"}
    objects = [*gpu_nodes(4), *busy(3), too_big, pod_of(too_big, 0, 16, status=unschedulable),
               waits, pod_of(waits, 0, 8), fits, pod_of(fits, 0, 1)]
    result = audit(objects, snapshot(objects), Policy())
    pending = result.pending
    assert [(e.subject.ref.name, e.gang.verdict if e.gang else "") for e in pending] == \
        [("too-big", "never"), ("waits", "waits"), ("fits", "fits")]
    never = pending[0].as_dict()
    assert never["rule"] == "GG403" and never["cause"] == "nodes-never-hold"
    assert "16" in never["reason"] and "offers 8" in never["reason"]
    assert never["systemSays"] == ["scheduler: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."]
    assert never["podSets"] == [{"podSet": "pods", "pods": 1, "eligibleNodes": 4, "fitsNow": 0,
                                 "fitsEmpty": 0}]
    wait = pending[1].as_dict()
    assert wait["rule"] == "GG404"
    assert (wait["podSets"][0]["fitsNow"], wait["podSets"][0]["fitsEmpty"]) == (0, 4)
    assert wait["podSets"][0]["mostFree"] == {GPU: "4"}     # on n3, half taken
    assert result.counts() == {"never": 1, "unknown": 0, "waits": 1, "fits": 1}
    assert result.by_cause() == {("never", "nodes-never-hold"): 1, ("waits", "waits-for-room"): 1,
                                 ("fits", "fits"): 1}


def test_objects_are_judged_as_stored_not_as_gpugate_would_have_patched_them() -> None:
    """Nodes without the usage label: the affinity GG101 injects would exclude every node, so
    judging the patched object says never; the pods run from the stored template, which fits."""
    pending_job = job("legacy", 1)
    objects = [*gpu_nodes(2), pending_job, pod_of(pending_job, 0, 1)]
    patched = evaluate(pending_job, Policy(), [snapshot(objects)])
    assert any(f.rule == "GG403" for f in patched.findings)          # what a CREATE would be told
    entry = run_audit(objects)["legacy"]
    assert entry["verdict"] == "fits"
    assert "GG101" in {f["rule"] for f in entry["findings"]}         # the scan still says it lacks them


def pytorch_gang(workers: int, gpus: int, bound_nodes: list[str]) -> list[Obj]:
    """A Volcano-scheduled PyTorchJob (a gang of master + workers), its first pods bound to
    ``bound_nodes``, the rest unscheduled."""
    template = {"spec": {"schedulerName": "volcano", "containers": [
        {"name": "pytorch", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]}}
    ptj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "gang", "namespace": "ml", "uid": "ptj", "creationTimestamp": STAMP},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                            "Worker": {"replicas": workers, "template": template}}}}
    pods = [pod_of(ptj, i, gpus, bound_nodes[i] if i < len(bound_nodes) else None)
            for i in range(workers + 1)]
    for p in pods:
        p["spec"]["schedulerName"] = "volcano"
    return [ptj, *pods]


def test_a_partly_placed_gang_is_not_judged_against_its_own_pods() -> None:
    objects = [*gpu_nodes(4), *pytorch_gang(3, 8, ["n0", "n1"])]
    entries = run_audit(objects)
    assert entries["gang"]["verdict"] == "fits", entries["gang"]
    assert entries["gang"]["podsBound"] == 2 and entries["gang"]["podsUnscheduled"] == 2
    # without its own pods freed, the same gang would be told to wait for them
    alone = evaluate(objects[4], Policy(), [snapshot(objects)], as_stored=True)
    assert any(f.rule == "GG404" for f in alone.findings)


def test_pods_placed_one_by_one_wait_for_room_their_siblings_hold() -> None:
    web = job("web", 8, parallelism=3)
    filler = job("filler", 8)
    objects = [*gpu_nodes(3), web, pod_of(web, 0, 8, "n0"), pod_of(web, 1, 8, "n1"), pod_of(web, 2, 8),
               filler, pod_of(filler, 0, 8, "n2")]
    assert run_audit(objects)["web"]["verdict"] == "waits"
    # one node fewer: the third pod never runs (the Job runs in part)
    smaller = [o for o in objects if o["metadata"]["name"] not in ("n2", "filler", "filler-0")]
    entry = run_audit(smaller)["web"]
    assert (entry["verdict"], entry["cause"], entry["partial"]) == ("never", "nodes-hold-part", True)


def test_kueue_and_volcano_states_say_why_an_object_is_held() -> None:
    suspended = job("queued", 8, labels={"kueue.x-k8s.io/queue-name": "lq"})
    suspended["spec"]["suspend"] = True
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "job-queued", "namespace": "team-a", "uid": "wl",
                             "ownerReferences": [owner(suspended)]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": "couldn't assign flavors to pod set main"}]}}
    vcjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": "vc", "namespace": "team-a", "uid": "vc"},
             "spec": {"minAvailable": 2, "schedulerName": "volcano", "queue": "default", "tasks": [
                 {"name": "t", "replicas": 2, "template": {"spec": {"containers": [
                     {"name": "m", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}]}}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "vc-pg", "namespace": "team-a", "uid": "pg",
                          "ownerReferences": [owner(vcjob)]},
             "spec": {"minMember": 2, "queue": "default"},
             "status": {"phase": "Pending", "conditions": [{"type": "Unschedulable", "status": "True",
                                                            "message": "2/0 tasks in gang unschedulable"}]}}
    plain = job("paused", 8)
    plain["spec"]["suspend"] = True    # suspended by hand, not by Kueue: nothing to wait for
    objects = [*gpu_nodes(1), suspended, workload, vcjob, group, plain]
    subjects = {s.ref.name: s for s in find_subjects(objects)}
    assert subjects["queued"].held_by == ["not admitted by Kueue"]
    assert subjects["queued"].system_says == ["kueue: couldn't assign flavors to pod set main"]
    assert subjects["vc"].held_by == ["pod group Pending"]
    assert subjects["vc"].system_says == ["volcano: 2/0 tasks in gang unschedulable"]
    assert not subjects["paused"].pending


def test_filters_choose_by_namespace_queue_and_kind() -> None:
    a = job("a", 1, ns="x", labels={"kueue.x-k8s.io/queue-name": "lq-a"})
    b = job("b", 1, ns="y")
    objects = [*gpu_nodes(1), a, pod_of(a, 0, 1), b, pod_of(b, 0, 1)]
    assert set(run_audit(objects, filters=Filters(namespaces=frozenset({"x"})))) == {"a"}
    assert set(run_audit(objects, filters=Filters(queues=frozenset({"lq-a"})))) == {"a"}
    assert set(run_audit(objects, filters=Filters(kinds=frozenset({"jobs"})))) == {"a", "b"}
    assert set(run_audit(objects, filters=Filters(kinds=frozenset({"Job.batch.volcano.sh"})))) == set()
    assert set(run_audit(objects, scan=False)) == {"a", "b"}


def test_a_stale_topology_makes_the_verdict_unknown_and_says_so() -> None:
    waits = job("waits", 8)
    objects = [*gpu_nodes(1), waits, pod_of(waits, 0, 8)]
    stale = snapshot(objects, updated_at=1.0)          # confirmed long ago
    entry = audit(objects, stale, Policy()).entries[0]
    assert entry.gang is not None and entry.gang.verdict == "unknown"
    assert entry.gang.cause == "stale-topology" and "old" in entry.gang.reason


# -- PolicyReports ----------------------------------------------------------------------------

def test_reports_per_namespace_with_a_cluster_report_and_a_bound() -> None:
    too_big = job("too-big", 16)
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": "q", "uid": "q"}, "spec": {"weight": -1}}
    objects = [*gpu_nodes(1), too_big, pod_of(too_big, 0, 16), queue]
    reports = build_reports(audit(objects, snapshot(objects), Policy()), 1_800_000_000)
    report = reports[("PolicyReport", "team-a")]
    assert report["metadata"]["name"] == "gpugate" and report["metadata"]["namespace"] == "team-a"
    verdict = report["results"][0]
    assert verdict["policy"] == "gpugate-feasibility" and verdict["rule"] == "nodes-never-hold"
    assert verdict["result"] == "fail" and verdict["resources"][0]["uid"] == "uid-too-big"
    assert verdict["timestamp"] == {"seconds": 1_800_000_000, "nanos": 0}
    assert not any(r["policy"] == "GG403" for r in report["results"])   # the verdict says it
    assert report["summary"]["fail"] == sum(r["result"] == "fail" for r in report["results"])
    cluster = reports[("ClusterPolicyReport", "")]
    assert "namespace" not in cluster["metadata"] and cluster["results"][0]["policy"] == "GG601"

    many = [j for i in range(MAX_RESULTS + 5) for j in (job(f"j{i}", 16), pod_of(job(f"j{i}", 16), 0, 16))]
    big = build_reports(audit([*gpu_nodes(1), *many], snapshot(gpu_nodes(1)), Policy(), scan=False), 0)
    kept = big[("PolicyReport", "team-a")]
    assert len(kept["results"]) == MAX_RESULTS
    assert all(r["result"] == "fail" for r in kept["results"])     # the worst are kept
    per_job = 3   # the verdict, GG101 and GG104 (warnings)
    left_out = per_job * (MAX_RESULTS + 5) - MAX_RESULTS
    assert kept["metadata"]["annotations"] == {"gpugate.io/results-left-out": str(left_out)}


def test_reports_match_the_upstream_policyreport_schema() -> None:
    crd_file = SHARED / "kube" / "crds" / "wg-policy.yaml"
    if not crd_file.is_file():
        pytest.skip("shared/kube/crds/wg-policy.yaml is not here")
    import jsonschema
    import yaml

    schemas = {}
    for doc in yaml.safe_load_all(crd_file.read_text()):
        if doc and doc.get("kind") == "CustomResourceDefinition" and doc["spec"]["group"] == "wgpolicyk8s.io":
            for version in doc["spec"]["versions"]:
                if version["name"] == "v1alpha2":
                    schemas[doc["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    too_big, fits = job("too-big", 16), job("fits", 1)
    objects = [*gpu_nodes(1), too_big, pod_of(too_big, 0, 16), fits, pod_of(fits, 0, 1)]
    for (kind, _), report in build_reports(audit(objects, snapshot(objects), Policy()), 1).items():
        jsonschema.validate(report, schemas[kind])


# -- the command ------------------------------------------------------------------------------

def gpugate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpugate", "audit", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture()
def cluster_file(tmp_path: Path) -> Path:
    too_big, waits, fits = job("too-big", 16), job("waits", 8), job("fits", 1)
    objects = [*gpu_nodes(4), *busy(3), too_big, pod_of(too_big, 0, 16), waits, pod_of(waits, 0, 8),
               fits, pod_of(fits, 0, 1)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def test_the_table_puts_the_worst_first_and_the_exit_code_follows_fail_on(cluster_file: Path) -> None:
    done = gpugate("--cluster", str(cluster_file), cwd=cluster_file.parent)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpugate audit of cluster")
    assert "3 pending: 1 never, 1 waits, 1 fits" in lines[0]
    verdicts = [line.split()[0] for line in lines if line[:1].isalpha() and line.split()[0] in
                ("never", "waits", "fits", "unknown")]
    assert verdicts == ["never", "waits", "fits"]
    assert "Findings on existing objects" in done.stdout
    relaxed = gpugate("--cluster", str(cluster_file), "--fail-on", "none", cwd=cluster_file.parent)
    assert relaxed.returncode == 0
    waits_only = gpugate("--cluster", str(cluster_file), "--fail-on", "waits", "--kind", "Job",
                         "--pending-only", "-f", "json", cwd=cluster_file.parent)
    assert waits_only.returncode == 1
    assert json.loads(waits_only.stdout)["verdicts"] == {"never": 1, "unknown": 0, "waits": 1, "fits": 1}


def test_json_and_sarif_say_what_the_table_says(cluster_file: Path) -> None:
    data = json.loads(gpugate("--cluster", str(cluster_file), "-f", "json", cwd=cluster_file.parent).stdout)
    assert [(p["object"]["name"], p["verdict"]) for p in data["pending"]] == \
        [("too-big", "never"), ("waits", "waits"), ("fits", "fits")]
    sarif = json.loads(gpugate("--cluster", str(cluster_file), "-f", "sarif", "--pending-only",
                               cwd=cluster_file.parent).stdout)
    run = sarif["runs"][0]
    results = [(r["ruleId"], r["level"], r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"])
               for r in run["results"]]
    assert results[:2] == [("GG403", "error", "Job team-a/too-big"), ("GG404", "warning", "Job team-a/waits")]
    assert {rule for rule, _, _ in results[2:]} == {"GG101", "GG104"}   # the pending objects' other findings
    rules = run["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])


@pytest.mark.parametrize(("args", "words"), [
    (["--cluster", "missing.json"], "cannot read cluster snapshot missing.json"),
    (["--cluster", "bad.yaml"], "bad.yaml:2:1: cluster snapshot: not valid YAML"),
    (["--cluster", "bad.yaml", "--write-reports"], "--write-reports writes to the live cluster"),
    (["--write-reports", "--queue", "q"], "use --namespace, not --queue or --kind"),
    (["--cluster", "bad.yaml", "--policy", "policy.yaml"], "policy.yaml"),
    (["--cluster", "bad.yaml", "--budget-ms", "0"], "--budget-ms must be positive"),
])
def test_bad_input_gets_a_clear_answer(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "bad.yaml").write_text("items: [\n")
    (tmp_path / "policy.yaml").write_text("feasibility: {mode: sideways}\n")
    done = gpugate(*args, cwd=tmp_path)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_pods_alone_are_judged_one_by_one_and_the_table_says_so(tmp_path: Path) -> None:
    lone = pod("lone", None, {GPU: "16"}, phase="Pending")
    path = tmp_path / "pods.yaml"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*gpu_nodes(1), lone]}))
    done = gpugate("--cluster", str(path), cwd=tmp_path)
    assert "snapshot --workloads" in done.stdout and "never    Pod default/lone" in done.stdout


def test_a_workload_its_queue_admitted_is_not_held_to_its_queue_again() -> None:
    """Kueue admitted the Job (its Workload has an admission); its LocalQueue was deleted since.
    Its pods wait for nodes, not for a queue that no longer matters to them."""
    admitted = job("admitted", 8, labels={"kueue.x-k8s.io/queue-name": "gone"})
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "job-admitted", "namespace": "team-a", "uid": "wl-a",
                             "ownerReferences": [owner(admitted)]},
                "status": {"admission": {"clusterQueue": "cq"}}}
    other_queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                   "metadata": {"name": "other", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}
    objects = [*gpu_nodes(4), *busy(3), other_queue, admitted, workload, pod_of(admitted, 0, 8)]
    entry = run_audit(objects)["admitted"]
    assert (entry["verdict"], entry["cause"]) == ("waits", "waits-for-room"), entry
    unadmitted = [o for o in objects if o is not workload]
    assert run_audit(unadmitted)["admitted"]["cause"] == "queue-absent"


def _without_clock(text: str) -> list[str]:
    """Lines of a table without what depends on the clock (ages, the run's duration)."""
    import re

    text = re.sub(r" in \d+\.\ds$", "", text, flags=re.M)
    text = re.sub(r"\b\d+[dhm]\d+[hms]\b|\b\d+s\b", "AGE", text)
    return [" ".join(line.split()) for line in text.splitlines()]


def test_the_readme_example_is_what_the_command_prints() -> None:
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    start = readme.index("Example (`gpugate audit --cluster examples/audit/cluster.yaml`")
    block = readme[readme.index("```\n", start) + 4: readme.index("```\n", readme.index("```\n", start) + 4)]
    done = gpugate("--cluster", "examples/audit/cluster.yaml", cwd=root)
    assert done.returncode == 1
    assert _without_clock(done.stdout.rstrip("\n")) == _without_clock(block.rstrip("\n"))


def test_report_write_errors_quote_the_api_server_and_spot_a_namespace_being_deleted() -> None:
    from kubernetes.client.exceptions import ApiException

    from audit.reports import _explain, _terminating

    terminating = ApiException(status=403, reason="Forbidden")
    terminating.body = json.dumps({
        "kind": "Status", "status": "Failure", "reason": "Forbidden",
        "message": 'policyreports.wgpolicyk8s.io "gpugate" is forbidden: unable to create new content in '
                   "namespace t1 because it is being terminated",
        "details": {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}})
    assert _terminating(terminating)
    assert "being terminated" in str(_explain(terminating, "writing PolicyReport t1/gpugate"))
    rbac = ApiException(status=403, reason="Forbidden")
    rbac.body = "not json"
    assert not _terminating(rbac)
    assert "these credentials need get, list, create, update and delete" in str(_explain(rbac, "writing"))
    absent = ApiException(status=404, reason="Not Found")
    assert "does not serve wgpolicyk8s.io/v1alpha2 PolicyReports" in str(_explain(absent, "listing"))


def test_a_terminal_gets_a_progress_bar_and_a_pipe_does_not(tmp_path: Path) -> None:
    import os
    import pty

    pods = [pod(f"p{i}", None, {GPU: "1"}, phase="Pending") for i in range(60)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*gpu_nodes(1), *pods]}))
    command = [sys.executable, "-m", "gpugate", "audit", "--cluster", str(path), "-o", os.devnull]
    leader, follower = pty.openpty()
    done = subprocess.run(command, stderr=follower, stdout=subprocess.DEVNULL, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:     # the terminal's other side is closed: all read
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert done.returncode == 0
    assert b"/60 objects" in seen and b"\r\x1b[K" in seen
    piped = subprocess.run(command, capture_output=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert b"objects" not in piped.stderr and b"\x1b" not in piped.stderr


def test_a_spent_budget_is_unknown_and_names_the_audits_budget() -> None:
    waits = job("waits", 8)
    objects = [*gpu_nodes(4), *busy(3), waits, pod_of(waits, 0, 8)]
    entry = audit(objects, snapshot(objects), Policy(), budget_seconds=1e-9).entries[-1]
    assert entry.gang is not None and (entry.gang.verdict, entry.gang.cause) == ("unknown", "budget-spent")
    assert "1e-06 ms per object, --budget-ms" in entry.gang.reason
