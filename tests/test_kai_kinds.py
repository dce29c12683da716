"""KAI Scheduler's own objects as kinds (issue 19): a KAI PodGroup (``scheduling.run.ai/v2alpha2``)
is a gang without pods judged against its KAI queue (GG306 warning when the queue is missing)
and by what KAI's webhook and CRD refuse (GG601); a KAI Queue (``v2``) by what its webhook
refuses. PodGroups KAI's podgrouper makes (an owner reference, with or without ``controller``)
are not judged again. The upstream test tables are in tests/parity/kai.yaml."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import corpus_files
from feasibility_helpers import feasibility_findings, gpu_node, podgroup, queue, run, snapshot

from lint.cli import Report, lint_text
from policies.changes import made_by_controller
from policies.config import Policy
from policies.engine import evaluate
from policies.feasibility import fit_question
from policies.kinds import KAI_SCHEDULER, kind_spec
from policies.validation import go_duration_seconds
from policies.validation.kai import podgroup as kai_podgroup
from policies.validation.kai import queue as kai_queue_validator
from policies.workload import build_workload
from webhook.admission import admit

Obj = dict[str, Any]


def kai_podgroup_doc(queue_name: str = "research", min_member: int = 2, **spec: Any) -> Obj:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team-a"},
            "spec": {"minMember": min_member, "queue": queue_name, **spec}}


def kai_queue(name: str, parent: str = "") -> Obj:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: Obj = {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def errors(doc: Obj, previous: Obj | None = None) -> list[str]:
    return [f"{f.rule} {f.message}" for f in evaluate(doc, Policy(), previous=previous).findings
            if str(f.severity) == "error"]


def question(doc: Obj) -> Any:
    workload = build_workload(doc)
    assert workload is not None
    return fit_question(workload, Policy())


def review(obj: Obj, operation: str = "CREATE") -> Obj:
    return {"uid": "u", "operation": operation, "object": obj,
            "namespace": obj["metadata"].get("namespace", ""), "name": obj["metadata"]["name"]}


# -- the rows ----------------------------------------------------------------------------------

def test_a_kai_podgroup_is_a_gang_without_pods_in_its_kai_queue() -> None:
    doc = kai_podgroup_doc("research", 3)
    doc["metadata"]["labels"] = {"kai.scheduler/queue": "not-read"}   # KAI schedules by spec.queue
    workload = build_workload(doc)
    assert workload is not None and workload.pod_sets == []
    assert workload.gang_min == 3 and workload.gang_min_path == "/spec/minMember"
    assert [(q.name, q.system, q.path, q.explicit) for q in workload.queues] == \
        [("research", "kai", "/spec/queue", True)]
    assert workload.spec.default_scheduler == KAI_SCHEDULER and workload.spec.validate == "kai.podgroup"
    queue_spec = kind_spec("scheduling.run.ai/v2", "Queue")
    assert queue_spec is not None and queue_spec.cluster_scoped and not queue_spec.pod_sets


# -- its queue ---------------------------------------------------------------------------------

def test_a_missing_kai_queue_holds_the_podgroup_a_warning() -> None:
    cluster = [snapshot([gpu_node("n0"), kai_queue("other")])]
    found = feasibility_findings(run(kai_podgroup_doc("research"), cluster))
    assert list(found) == ["GG306"] and found["GG306"][0].startswith("warning"), found
    assert "KAI queue `research` does not exist" in found["GG306"][0]
    assert not feasibility_findings(run(kai_podgroup_doc("research"), [snapshot([gpu_node("n0"),
                                                                                 kai_queue("research")])]))
    # a snapshot without KAI queues proves nothing
    assert not feasibility_findings(run(kai_podgroup_doc("research"), [snapshot([gpu_node("n0")])]))
    # no queue named: nothing to judge
    assert question(kai_podgroup_doc("")) is None


def test_the_volcano_podgroup_question_is_unchanged() -> None:
    """A Volcano PodGroup asks of its Volcano queue alone (a KAI label on it is no queue of its)."""
    doc = podgroup("train-pg", "q", {"metax-tech.com/gpu": "16"}, phase="Pending")
    doc["metadata"]["labels"] = {"kai.scheduler/queue": "research"}
    asked = question(doc)
    assert asked is not None and asked.scheduler_queues == ()
    assert asked.queue is not None and (asked.queue.name, asked.queue.system) == ("q", "volcano")
    assert asked.declared == (("metax-tech.com/gpu", 16),)
    cluster = [snapshot([gpu_node("n0"), queue("q", {"metax-tech.com/gpu": "8"}), kai_queue("other")])]
    found = feasibility_findings(run(doc, cluster))
    assert list(found) == ["GG402"] and found["GG402"][0].startswith("error"), found


# -- what KAI's own validation refuses (GG601) ---------------------------------------------------

def test_subgroup_tree_refusals() -> None:
    ok = kai_podgroup_doc(subGroups=[{"name": "both"}, {"name": "leaders", "parent": "both", "minMember": 1},
                                     {"name": "workers", "parent": "both", "minMember": 4}])
    assert errors(ok) == []
    looped = kai_podgroup_doc(subGroups=[{"name": "a", "parent": "c"}, {"name": "b", "parent": "a"},
                                         {"name": "c", "parent": "b"}, {"name": "d", "parent": "d"},
                                         {"name": "e", "parent": "a"}])
    messages = [refusal.message for refusal in kai_podgroup(looped)]
    assert len(messages) == 2, messages
    assert "spec.subGroups[0].parent makes a cycle (a -> c -> b -> a)" in messages[0]
    assert "(d -> d)" in messages[1]
    orphan = kai_podgroup_doc(subGroups=[{"name": "a", "parent": ""}])
    assert [r.path for r in kai_podgroup(orphan)] == ["/spec/subGroups/0/parent"]


def test_what_is_not_judged() -> None:
    # another version: KAI's webhook registers for v2alpha2 PodGroups and v2 Queues only
    other = kai_podgroup_doc(min_member=0)
    other["apiVersion"] = "scheduling.run.ai/v2alpha1"
    assert list(kai_podgroup(other)) == []
    assert list(kai_queue_validator({"apiVersion": "scheduling.run.ai/v1", "kind": "Queue",
                                     "metadata": {"name": "q"}})) == []
    # types are the CRD schema's; quotas and limits are plain numbers to KAI; parentQueue unchecked
    odd = kai_podgroup_doc(subGroups=[{"name": 1}, "x", {"name": "a", "parent": 2, "minMember": "3"}])
    assert list(kai_podgroup(odd)) == []
    free = kai_queue("q", parent="q")
    free["spec"]["resources"]["gpu"] = {"quota": 5, "limit": 2, "overQuotaWeight": -3}
    assert list(kai_queue_validator(free)) == []


def test_queue_refusals() -> None:
    bare = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}}
    refused = list(kai_queue_validator(bare))
    assert [(r.path, "spec.resources is not set" in r.message) for r in refused] == [("", True)]
    assert list(kai_queue_validator({**bare, "spec": {"resources": {}}})) == []
    for text, ok in (("20s", True), ("1h30m", True), ("0", True), ("-1.5h", True), (".5s", True),
                     ("1d", False), ("20 s", False), ("", False), ("10", False), (".s", False)):
        assert (go_duration_seconds(text) is not None) is ok, text
        doc = kai_queue("q")
        doc["spec"]["reclaimMinRuntime"] = text
        assert bool(list(kai_queue_validator(doc))) is not ok, text


def test_updates_are_judged_too() -> None:
    """KAI's webhooks run the same checks on UPDATE (validate_on_update)."""
    before = kai_podgroup_doc(subGroups=[{"name": "a"}])
    after = copy.deepcopy(before)
    after["spec"]["subGroups"].append({"name": "a"})
    assert any("duplicate subGroup names" in e for e in errors(after, previous=before))


# -- PodGroups KAI's podgrouper makes ------------------------------------------------------------

@pytest.mark.parametrize("owner", [
    {"apiVersion": "v1", "kind": "Pod", "name": "gpu-pod", "uid": "u"},            # a bare pod's
    {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "w", "uid": "u"},  # no row
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "j", "uid": "u", "controller": False},
])
def test_podgroups_the_podgrouper_makes_are_not_judged_again(owner: Obj) -> None:
    made = kai_podgroup_doc("Not_A_Queue", subGroups=[{"name": "a"}, {"name": "a"}])
    assert errors(made)       # written by hand: GG304, GG601
    made["metadata"]["ownerReferences"] = [owner]
    assert made_by_controller(made)
    assert evaluate(made, Policy()).owned
    cluster = [snapshot([gpu_node("n0"), kai_queue("other")], updated_at=time.monotonic())]
    for endpoint in ("mutate", "validate"):
        outcome = admit(review(made), endpoint, Policy(), cluster)
        assert outcome.verdict == "owned" and outcome.response == {"uid": "u", "allowed": True}


def test_only_the_kai_podgroup_row_counts_any_owner() -> None:
    volcano = podgroup("pg", "q", {})
    volcano["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]
    assert not made_by_controller(volcano)
    assert not made_by_controller({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                   "metadata": {"name": "q", "ownerReferences": [{"kind": "X"}]}})
    assert not made_by_controller({**kai_podgroup_doc(), "metadata": {"ownerReferences": "x"}})


# -- the corpus ----------------------------------------------------------------------------------

def test_kai_manifests_of_the_corpus(corpus_dir: Path) -> None:
    """Every KAI manifest lints without a crash; the only errors are the KAI Queues that really
    lack spec.resources (a doc snippet, and one that writes ``resourceQuota``)."""
    files = [p for p in corpus_files() if "scheduling.run.ai" in p.read_text("utf-8", "replace")]
    assert len(files) >= 15
    queues_without_resources = 0
    for path in files:
        text = path.read_text("utf-8")
        report = Report()
        lint_text(text, str(path), Policy(), report)
        docs = list(yaml.safe_load_all(text))
        for located in report.findings:
            f = located.finding
            assert "internal error" not in f.message.lower(), (path, f)
            if str(f.severity) != "error":
                continue
            doc = docs[located.document]
            assert (f.rule, doc["kind"], f.path) == ("GG601", "Queue", "/spec"), (path, f)
            assert "resources" not in (doc.get("spec") or {}), (path, f)
            queues_without_resources += 1
    assert queues_without_resources == 2
