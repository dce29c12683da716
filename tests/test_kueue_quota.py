"""Kueue quota: LocalQueue -> ClusterQueue -> flavors, nominal quota, borrowing and lending
limits in (hierarchical) cohorts, as Kueue's flavor assigner decides admission
(policies/feasibility/kueue.py over policies/topology/kueue.py)."""

from __future__ import annotations

import copy
import itertools
import random
import time
from typing import Any

import jsonschema
import pytest
from feasibility_helpers import USAGE, feasibility_findings, node, pod, question_of, run, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.config import Policy, PolicyError, policy_from_data
from policies.engine import evaluate
from policies.feasibility import FitQuestion, check
from policies.feasibility.kueue import _tree
from policies.feasibility.outcomes import Cause, Outcome, Verdict
from policies.kinds import KINDS, KUEUE_FRAMEWORKS
from policies.labelselectors import SELECTOR_SCHEMA, holds, read_selector, requirements, selects
from policies.topology import Topology

Obj = dict[str, Any]


def in_a_minute() -> float:
    """The deadline of a verdict here: not the 200 ms budget, which a busy machine may spend."""
    return time.monotonic() + 60

KUEUE = "kueue.x-k8s.io/v1beta1"
GPU = "nvidia.com/gpu"


def gpu_nodes(count: int = 4, gpus: int = 8) -> list[Obj]:
    return [node(f"n{i}", {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}, {USAGE: "training"})
            for i in range(count)]


def flavor(name: str) -> Obj:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}}


def local_queue(name: str = "team", cq: str = "cq-a", namespace: str = "ml") -> Obj:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def quota(resource: str, nominal: int | str, borrowing: int | None = None, lending: int | None = None) -> Obj:
    found: Obj = {"name": resource, "nominalQuota": nominal}
    if borrowing is not None:
        found["borrowingLimit"] = borrowing
    if lending is not None:
        found["lendingLimit"] = lending
    return found


def cluster_queue(name: str, flavors: dict[str, list[Obj]], cohort: str | None = None,
                  covered: tuple[str, ...] = ("cpu", "memory", GPU), used: dict[str, int] | None = None,
                  version: str = KUEUE, **spec: Any) -> Obj:
    groups = [{"coveredResources": list(covered),
               "flavors": [{"name": f, "resources": r} for f, r in flavors.items()]}]
    # Kueue's docs' ClusterQueues admit every namespace ({}); namespaceSelector=None leaves it out
    body: Obj = {"resourceGroups": groups, **{"namespaceSelector": {}, **spec}}
    if body["namespaceSelector"] is None:
        del body["namespaceSelector"]
    if cohort is not None:
        body["cohortName" if version.endswith("v1beta2") else "cohort"] = cohort
    found: Obj = {"apiVersion": version, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}
    if used:
        found["status"] = {"flavorsReservation": [
            {"name": f, "resources": [{"name": GPU, "total": str(v)}]} for f, v in used.items()]}
    return found


def cohort(name: str, parent: str | None = None, flavors: dict[str, list[Obj]] | None = None) -> Obj:
    spec: Obj = {}
    if parent is not None:
        spec["parentName"] = parent
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": [GPU], "flavors": [
            {"name": f, "resources": r} for f, r in flavors.items()]}]
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def full(gpus: int, borrowing: int | None = None, lending: int | None = None) -> list[Obj]:
    return [quota("cpu", 1000), quota("memory", "10Ti"), quota(GPU, gpus, borrowing, lending)]


def job(gpus: int, pods: int = 1, queue: str = "team", extra: Obj | None = None) -> Obj:
    """A PyTorchJob gang: Kueue admits all its pods at once."""
    limits = {GPU: gpus, **(extra or {})}

    def replica(count: int) -> Obj:
        return {"replicas": count, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": limits}}]}}}

    specs = {"Master": replica(1)}
    if pods > 1:
        specs["Worker"] = replica(pods - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"pytorchReplicaSpecs": specs}}


def findings(doc: Obj, objects: list[Obj], policy: Policy | None = None) -> dict[str, list[str]]:
    pol = policy or Policy()
    return feasibility_findings(run(doc, [snapshot([*gpu_nodes(), *objects], pol)], pol, in_a_minute()))


SHARED = [flavor("a100"), local_queue(),
          cluster_queue("cq-a", {"a100": full(4, borrowing=4)}, cohort="shared"),
          cluster_queue("cq-b", {"a100": full(12, lending=2)}, cohort="shared")]


def test_quota_beyond_what_the_cluster_queue_can_ever_borrow_is_never() -> None:
    """cq-a: 4 of its own, borrowing at most 4, from a cohort where cq-b lends at most 2: 6 at most
    (Kueue's potentialAvailable), though the nodes hold 32 GPUs."""
    assert "GG402" not in findings(job(6), SHARED)
    found = findings(job(7), SHARED)["GG402"]
    assert found == ["error: insufficient quota for nvidia.com/gpu in flavor `a100`: 7 asked by pod set "
                     "Master > maximum capacity 6 of ClusterQueue `cq-a`"]
    # a gang of 2 x 4: each pod set fits, the whole does not
    assert findings(job(4, pods=2), SHARED)["GG402"] == [
        "error: 8 nvidia.com/gpu asked in all, ClusterQueue `cq-a` can ever admit 6 over its flavors (a100)"]


def test_without_a_cohort_only_the_nominal_quota() -> None:
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})]
    assert "GG402" not in findings(job(4), alone)
    assert "GG402" in findings(job(5), alone)


def test_a_pod_set_takes_one_flavor_of_a_group_but_the_gang_may_split() -> None:
    two = [flavor("a100"), flavor("h100"), local_queue(),
           cluster_queue("cq-a", {"a100": full(4), "h100": full(4)})]
    assert "GG402" in findings(job(5), two), "no one flavor holds 5"
    assert "GG402" not in findings(job(4, pods=2), two), "master on a100, worker on h100"
    assert "GG402" in findings(job(5, pods=2), two), "the master alone fits no flavor"


def test_hierarchical_cohorts_lend_up_and_borrow_down() -> None:
    """A root cohort with quota of its own, a child cohort lending at most 2 of its subtree."""
    objects = [flavor("a100"), local_queue(),
               cohort("root", flavors={"a100": [quota(GPU, 8)]}),
               cohort("team", parent="root"),
               cluster_queue("cq-a", {"a100": full(2)}, cohort="team"),
               cluster_queue("cq-b", {"a100": full(4, lending=1)}, cohort="root")]
    # cq-a: 2 + everything up the tree: root 8 + cq-b lends 1 -> 11
    assert "GG402" not in findings(job(11), objects)
    assert "GG402" in findings(job(12), objects)


def test_uncovered_resource_is_never_unless_kueue_excludes_it() -> None:
    fpga = job(1, extra={"example.com/fpga": 1})
    objects = [*SHARED, node("fpga-0", {"cpu": "8", "memory": "16Gi", "example.com/fpga": "4"},
                             {USAGE: "training"})]
    assert findings(fpga, objects)["GG402"] == [
        "error: resource example.com/fpga unavailable in ClusterQueue `cq-a`: no resource group covers "
        "it, so Kueue never admits the workload"]
    excluded = policy_from_data({"queues": {"kueueExcludeResourcePrefixes": ["example.com/"]}})
    assert "GG402" not in findings(fpga, objects, excluded)


def test_waits_for_quota_held_by_admitted_workloads() -> None:
    busy = [*SHARED[:2], cluster_queue("cq-a", {"a100": full(4, borrowing=4)}, cohort="shared",
                                       used={"a100": 4}), SHARED[3]]
    found = findings(job(4), busy)
    assert "GG402" not in found
    assert found["GG404"] == ["warning: waits for quota in ClusterQueue `cq-a`: 4 nvidia.com/gpu asked "
                              "(pod set Master), 2 free now in the best flavor"]
    assert "GG404" not in findings(job(2), busy)


@pytest.mark.parametrize("objects, says", [
    ([flavor("a100"), local_queue(cq="gone"), cluster_queue("cq-a", {"a100": full(4)})],
     "Kueue LocalQueue `team` points at ClusterQueue `gone`, which does not exist"),
    ([flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)}, stopPolicy="Hold")],
     "ClusterQueue `cq-a` is stopped"),
    ([flavor("h100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})],
     "ResourceFlavor `a100` does not exist"),
    ([flavor("a100"), {**local_queue(), "spec": {"clusterQueue": "cq-a", "stopPolicy": "HoldAndDrain"}},
      cluster_queue("cq-a", {"a100": full(4)})],
     "Kueue LocalQueue `team` is stopped (stopPolicy)"),
])
def test_kueue_holds_the_workload(objects: list[Obj], says: str) -> None:
    found = findings(job(1), objects)
    assert "GG402" not in found and any(says in m for m in found["GG306"])


def admission_check(name: str, active: str | None = "True") -> Obj:
    found: Obj = {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
                  "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}}
    if active is not None:
        found["status"] = {"conditions": [{"type": "Active", "status": active, "reason": "Active"}]}
    return found


@pytest.mark.parametrize("checks, spec, says", [
    ([admission_check("other")], {"admissionChecks": ["prov"]}, "AdmissionCheck `prov` does not exist"),
    ([admission_check("prov", None)], {"admissionChecks": ["prov"]}, "AdmissionCheck `prov` is not active"),
    ([admission_check("prov", "False")], {"admissionChecksStrategy": {"admissionChecks": [
        {"name": "prov", "onFlavors": ["a100"]}]}}, "AdmissionCheck `prov` is not active"),
    ([admission_check("prov")], {"admissionChecks": ["prov"]}, None),
    ([], {"admissionChecks": ["prov"]}, None),          # the snapshot holds no AdmissionChecks: not judged
])
def test_admission_checks_a_cluster_queue_names_must_exist_and_be_active(
        checks: list[Obj], spec: Obj, says: str | None) -> None:
    """Kueue holds a ClusterQueue inactive ("references missing AdmissionCheck(s)", "references
    inactive AdmissionCheck(s)") while an AdmissionCheck it names is missing or its controller has
    not set it Active: every workload waits (GG306); the quota's nevers still stand."""
    objects = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)}, **spec), *checks]
    found = findings(job(2), objects)
    if says is None:
        assert not found, found
    else:
        assert list(found) == ["GG306"] and found["GG306"] == [
            f"warning: ClusterQueue `cq-a` is inactive: {says}: Kueue admits nothing through it until that "
            f"changes"]
        assert list(findings(job(8), objects)) == ["GG402"]


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(["", "a", "prov", "True", "Active", "In",
                                                                      "Hold", "None", "ml", "a100"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["matchLabels", "matchExpressions", "key", "operator", "values", "name", "type",
                         "status", "admissionChecks", "onFlavors", "a"]), children, max_size=3),
    max_leaves=12)
_FIELDS = {"ClusterQueue": ("spec", ["namespaceSelector", "admissionChecks", "admissionChecksStrategy",
                                     "stopPolicy"]),
           "LocalQueue": ("spec", ["clusterQueue", "stopPolicy"]),
           "AdmissionCheck": ("status", ["conditions"]),
           "Namespace": ("metadata", ["labels"])}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(_FIELDS)), st.integers(0, 3), _ANY_JSON), max_size=6))
def test_kueue_objects_of_any_shape_never_break_a_verdict(edits: list[tuple[str, int, Any]]) -> None:
    """A snapshot file is user input: a ClusterQueue's selector and checks, a LocalQueue's stop, an
    AdmissionCheck's conditions and a namespace's labels of any shape are read as far as they make
    sense, and the job is still judged (never an exception; a quota it can never get stays never)."""
    policy = Policy()
    base = {"ClusterQueue": cluster_queue("cq-a", {"a100": full(4)}, admissionChecks=["prov"]),
            "LocalQueue": local_queue(), "AdmissionCheck": admission_check("prov"),
            "Namespace": namespace("ml")}
    cluster = snapshot([*gpu_nodes(), flavor("a100"), *base.values()], policy)
    for kind, which, value in edits:
        section, fields = _FIELDS[kind]
        changed = copy.deepcopy(base[kind])
        changed.setdefault(section, {})[fields[which % len(fields)]] = value
        cluster.topology.apply("MODIFIED", changed)
    found = feasibility_findings(run(job(2), [cluster], policy, in_a_minute()))
    assert set(found) <= {"GG306", "GG404"}, found
    if not any(kind == "LocalQueue" and which % 2 == 0 for kind, which, _ in edits):  # still to cq-a
        assert "GG402" in feasibility_findings(run(job(8), [cluster], policy, in_a_minute()))


def test_a_local_queue_stopped_and_resumed_moves_the_answer() -> None:
    """A LocalQueue's stopPolicy is versioned like the rest of it: resumed (None), or deleted on a
    relist, it holds nothing any more; a quota it can never grant is never all the same."""
    policy = Policy()
    stopped = {**local_queue(), "spec": {"clusterQueue": "cq-a", "stopPolicy": "Hold"}}
    objects = [*gpu_nodes(), flavor("a100"), stopped, cluster_queue("cq-a", {"a100": full(4)})]
    cluster = snapshot(objects, policy)

    def found(gpus: int) -> dict[str, list[str]]:
        return feasibility_findings(run(job(gpus), [cluster], policy, in_a_minute()))

    assert list(found(2)) == ["GG306"] and list(found(8)) == ["GG402"]
    cluster.topology.apply("MODIFIED", {**stopped, "spec": {"clusterQueue": "cq-a", "stopPolicy": "None"}})
    assert not found(2)
    cluster.topology.apply("MODIFIED", stopped)
    assert list(found(2)) == ["GG306"]
    cluster.topology.replace_all("LocalQueue", [local_queue(name="other")])
    assert cluster.topology.stopped_local_queues == set()
    assert any("`team` does not exist" in m for m in found(2)["GG306"])


def test_v1beta2_field_names_and_cycles() -> None:
    beta2 = [flavor("a100"), local_queue(),
             cluster_queue("cq-a", {"a100": [quota("cpu", 1000), quota("memory", "10Ti"), quota(GPU, 4)]},
                           cohort="shared", version="kueue.x-k8s.io/v1beta2"),
             cluster_queue("cq-b", {"a100": full(4)}, cohort="shared", version="kueue.x-k8s.io/v1beta2")]
    assert "GG402" not in findings(job(8), beta2)
    assert "GG402" in findings(job(9), beta2)
    cycle = [*beta2, cohort("shared", parent="loop"), cohort("loop", parent="shared")]
    assert "GG402" not in findings(job(9), cycle), "a cohort cycle: Kueue admits nothing there, not judged"


def test_quota_changes_move_the_answer() -> None:
    policy = Policy()
    cluster = snapshot([*gpu_nodes(), *SHARED], policy)
    assert "GG402" in feasibility_findings(evaluate(job(7), policy, [cluster]))
    cluster.topology.apply("MODIFIED", cluster_queue(
        "cq-b", {"a100": full(12, lending=4)}, cohort="shared"))
    assert "GG402" not in feasibility_findings(evaluate(job(7), policy, [cluster]))


# -- brute force: never means no flavor assignment fits the potential quota -----------------------------

def _potentials(objects: list[Obj], flavors: list[str]) -> dict[str, int]:
    topo = Topology.from_objects(objects)
    tree = _tree(topo)
    assert tree is not None
    return {f: tree.potential(tree.queues["cq-a"], (f, GPU)) for f in flavors}


def test_never_only_when_no_assignment_fits_brute_force() -> None:
    rng = random.Random(1126)
    for _ in range(150):
        flavors = [f"f{i}" for i in range(rng.randint(1, 3))]
        objects: list[Obj] = [local_queue(), *(flavor(f) for f in flavors)]
        for q in range(rng.randint(1, 3)):
            borrowing = rng.choice([None, 0, 2, 6]) if q == 0 else None
            quotas = {f: full(rng.randint(0, 8), borrowing, rng.choice([None, 0, 3])) for f in flavors}
            in_cohort = rng.choice([None, "c"]) if q == 0 else "c"
            objects.append(cluster_queue("cq-a" if q == 0 else f"cq-{q}", quotas, cohort=in_cohort))
        sets = [rng.randint(1, 8) for _ in range(rng.randint(1, 2))]   # GPUs of master, of the worker
        doc = job(sets[0], pods=len(sets))
        if len(sets) == 2:
            doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
                "limits": {GPU: sets[1]}}
        potential = _potentials(objects, flavors)
        fits = any(all(sum(g for g, f in zip(sets, choice, strict=True) if f == fl) <= potential[fl]
                       for fl in flavors)
                   for choice in itertools.product(flavors, repeat=len(sets)))
        never = "GG402" in findings(doc, objects)
        assert not (never and fits), (objects, sets, potential)


def job_spec(gpus: int, parallelism: int | None, completions: int | None) -> Obj:
    """A batch JobSpec of pods of ``gpus`` GPUs, ``None`` left out (the defaults)."""
    spec: Obj = {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "x", "resources": {"limits": {GPU: gpus}}}]}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return spec


def batch_job(gpus: int, parallelism: int | None, completions: int | None = None,
              min_parallelism: str | None = None) -> Obj:
    """A batch Job in LocalQueue ``team``: Kueue admits all its running pods at once."""
    spec = job_spec(gpus, parallelism, completions)
    meta: Obj = {"name": "sweep", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}}
    if min_parallelism is not None:
        meta["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": min_parallelism}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def test_kueue_admits_a_batch_job_whole_or_down_to_its_partial_admission_minimum() -> None:
    """Kueue's Workload for a Job counts min(parallelism, completions) pods, and asks quota for all
    of them (or for kueue.x-k8s.io/job-min-parallelism, with partial admission); the scheduler
    then places them one by one."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(8)})]
    assert "GG402" not in findings(batch_job(8, 1), alone)
    assert findings(batch_job(8, 2), alone)["GG402"] == [
        "error: insufficient quota for nvidia.com/gpu in flavor `a100`: 16 asked by pod set pods > maximum "
        "capacity 8 of ClusterQueue `cq-a`"]
    assert "GG402" not in findings(batch_job(8, 2, completions=1), alone), "one pod runs at a time"
    assert "GG402" not in findings(batch_job(8, None, completions=4), alone), "parallelism defaults to 1"
    assert "GG402" not in findings(batch_job(8, 2, min_parallelism="1"), alone), "partial admission"
    for bad in ("0", "2", "3", "x", "-1"):   # not a minimum Kueue's webhook accepts: the whole Job
        assert "GG402" in findings(batch_job(8, 2, min_parallelism=bad), alone), bad


def test_batch_job_quota_never_only_when_kueue_could_never_admit_it_brute_force() -> None:
    rng = random.Random(2611)
    for _ in range(120):
        nominal = rng.randint(0, 24)
        gpus, parallelism = rng.randint(1, 8), rng.choice([None, 1, 2, 3, 5])
        completions = rng.choice([None, 1, 2, 4])
        least = rng.choice([None, "1", "2", "4"])
        objects = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(nominal)})]
        count = min(parallelism or 1, completions if completions is not None else parallelism or 1)
        fewest = int(least) if least is not None and 0 < int(least) < count else count
        admissible = fewest * gpus <= nominal
        never = "GG402" in findings(batch_job(gpus, parallelism, completions, least), objects)
        assert never == (not admissible), (nominal, gpus, parallelism, completions, least)


def jobset(gpus: int, jobs: list[tuple[int | None, int | None, int | None]]) -> Obj:
    """A JobSet under the LocalQueue: per replicated job (replicas, parallelism, completions),
    ``None`` left out (the defaults)."""
    replicated = []
    for i, (replicas, parallelism, completions) in enumerate(jobs):
        entry: Obj = {"name": f"rj{i}", "template": {"spec": job_spec(gpus, parallelism, completions)}}
        if replicas is not None:
            entry["replicas"] = replicas
        replicated.append(entry)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "set", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
            "spec": {"replicatedJobs": replicated}}


def test_kueue_admits_kubeflow_jobs_and_jobsets_whole_whatever_their_gang_minimum() -> None:
    """Kueue's Workload for a training-operator job counts every replica of every type, for a
    JobSet replicas x min(parallelism, completions) per replicated job, and admits them together:
    a gang minimum (minAvailable) below that does not lower what the quota must hold."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(16)})]
    gang = job(8, pods=3)
    gang["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
    assert findings(gang, alone)["GG402"] == [
        "error: 24 nvidia.com/gpu asked in all, ClusterQueue `cq-a` can ever admit 16 over its flavors "
        "(a100)"]
    assert "GG402" not in findings(job(8, pods=2), alone)
    # an MPIJob too, the mpi-operator's (v2beta1); the training-operator's v1 is not Kueue's
    mpi = {**gang, "kind": "MPIJob", "spec": {"runPolicy": gang["spec"]["runPolicy"],
                                              "mpiReplicaSpecs": gang["spec"]["pytorchReplicaSpecs"]}}
    assert "GG402" not in findings(mpi, alone)
    assert "GG402" in findings({**mpi, "apiVersion": "kubeflow.org/v2beta1"}, alone)
    assert "GG402" in findings(jobset(8, [(1, 2, None), (1, None, None)]), alone), "3 pods of 8"
    assert "GG402" not in findings(jobset(8, [(2, 4, 1)]), alone), "2 x min(4, 1) pods of 8"


def test_kubeflow_and_jobset_quota_never_only_when_kueue_could_never_admit_them_brute_force() -> None:
    rng = random.Random(1127)
    for _ in range(120):
        nominal, gpus = rng.randint(0, 24), rng.randint(1, 4)
        objects = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(nominal)})]
        if rng.random() < 0.5:
            pods = rng.randint(1, 4)
            doc = job(gpus, pods=pods)
            if rng.random() < 0.5:
                doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": rng.randint(1, pods)}}
            count = pods
        else:
            jobs = [(rng.choice([None, 1, 2]), rng.choice([None, 1, 2, 3]), rng.choice([None, 1, 2]))
                    for _ in range(rng.randint(1, 2))]
            doc = jobset(gpus, jobs)
            count = sum((replicas if replicas is not None else 1)
                        * min(parallelism or 1, completions if completions is not None else parallelism or 1)
                        for replicas, parallelism, completions in jobs)
        never = "GG402" in findings(doc, objects)
        assert never == (count * gpus > nominal), (nominal, gpus, doc["spec"])


# -- which objects Kueue manages: its integrations (queues.kueueFrameworks) --------------------------------

def labelled(doc: Obj, queue: str = "team") -> Obj:
    doc["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = queue
    return doc


def test_a_kind_whose_kueue_integration_is_off_gets_no_kueue_verdict() -> None:
    """Kueue reads the queue label only of the kinds whose integration it runs: with `batch/job`
    off, a Job's label is nobody's, and neither the quota it could never get nor the LocalQueue
    it names is judged."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})]
    assert "GG402" in findings(batch_job(8, 1), alone)
    assert any("LocalQueue `gone`" in m for m in findings(labelled(batch_job(1, 1), "gone"), alone)["GG306"])
    frameworks = [f for f in Policy().data["queues"]["kueueFrameworks"] if f != "batch/job"]
    without = policy_from_data({"queues": {"kueueFrameworks": frameworks}})
    assert "GG402" not in findings(batch_job(8, 1), alone, without)
    assert "GG306" not in findings(labelled(batch_job(1, 1), "gone"), alone, without)
    # nor is the name's format (GG304: Kueue's webhook refuses only what it manages)
    bad_name = labelled(batch_job(1, 1), "ML_Team")
    assert [f.rule for f in evaluate(bad_name, Policy()).findings if f.rule == "GG304"] == ["GG304"]
    assert not [f for f in evaluate(bad_name, without).findings if f.rule == "GG304"]
    # the other kinds are judged as before; an empty list turns Kueue's verdicts off altogether
    assert "GG402" in findings(job(8), alone, without)
    assert "GG402" not in findings(job(8), alone, policy_from_data({"queues": {"kueueFrameworks": []}}))


def test_kinds_kueue_has_no_integration_for_are_not_judged_against_a_kueue_queue() -> None:
    """A training-operator MPIJob (kubeflow.org/v1: Kueue integrates only the mpi-operator's
    v2beta1), a Volcano Job and a ReplicaSet: Kueue never reads their label."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(4)})]
    pytorch = job(8)
    mpi = {**pytorch, "kind": "MPIJob", "spec": {"mpiReplicaSpecs": pytorch["spec"]["pytorchReplicaSpecs"]}}
    assert "GG402" not in findings(mpi, alone)
    assert findings({**mpi, "apiVersion": "kubeflow.org/v2beta1"}, alone)["GG402"]
    volcano = labelled({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                        "metadata": {"name": "vj", "namespace": "ml"},
                        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [
                            {"name": "t", "replicas": 1, "template": {"spec": {"containers": [
                                {"name": "main", "image": "x", "resources": {"limits": {GPU: 8}}}]}}}]}})
    replica_set = labelled({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "metadata": {"name": "rs", "namespace": "ml"},
                            "spec": {"replicas": 1, "template": job_spec(8, None, None)["template"]}})
    for doc in (volcano, replica_set):
        found = findings(doc, alone)
        assert "GG402" not in found and "GG306" not in found, doc["kind"]


def test_a_cronjob_is_judged_by_its_job_templates_queue_label() -> None:
    """Kueue admits the Jobs a CronJob makes, whole (min(parallelism, completions) pods): their
    label is the job template's; one on the CronJob itself is not Kueue's."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(8)})]
    template: Obj = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team"}},
                     "spec": job_spec(8, 2, None)}
    cron: Obj = {"apiVersion": "batch/v1", "kind": "CronJob",
                 "metadata": {"name": "nightly", "namespace": "ml"},
                 "spec": {"schedule": "0 1 * * *", "jobTemplate": template}}
    assert findings(cron, alone)["GG402"] == [
        "error: insufficient quota for nvidia.com/gpu in flavor `a100`: 16 asked by pod set pods > maximum "
        "capacity 8 of ClusterQueue `cq-a`"]
    template["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    assert "GG402" not in findings(cron, alone), "partial admission down to one pod"
    on_the_cronjob = copy.deepcopy(cron)
    del on_the_cronjob["spec"]["jobTemplate"]["metadata"]
    labelled(on_the_cronjob)
    assert "GG402" not in findings(on_the_cronjob, alone)


def test_kueue_admits_a_statefulset_whole_and_a_deployment_pod_by_pod() -> None:
    """Kueue makes one Workload of all a StatefulSet's replicas (a pod group), and one per pod of a
    Deployment: 2 replicas of 8 GPUs under 8 can never be admitted as a StatefulSet, pod by pod
    they can."""
    alone = [flavor("a100"), local_queue(), cluster_queue("cq-a", {"a100": full(8)})]

    def apps(kind: str, replicas: int) -> Obj:
        return labelled({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "s", "namespace": "ml"},
                         "spec": {"replicas": replicas, "template": job_spec(8, None, None)["template"]}})

    assert findings(apps("StatefulSet", 2), alone)["GG402"] == [
        "error: insufficient quota for nvidia.com/gpu in flavor `a100`: 16 asked by pod set pods > maximum "
        "capacity 8 of ClusterQueue `cq-a`"]
    assert "GG402" not in findings(apps("StatefulSet", 1), alone)
    assert "GG402" not in findings(apps("Deployment", 2), alone)


def test_every_kind_with_a_kueue_queue_names_its_integration() -> None:
    """The kinds table: a Kueue queue source exactly on the kinds Kueue integrates, and the default
    of queues.kueueFrameworks is every one of them."""
    for spec in KINDS:
        kueue = [q for q in spec.queues if q.system == "kueue"]
        assert bool(kueue) == bool(spec.kueue_framework), spec.label
    assert Policy().data["queues"]["kueueFrameworks"] == sorted(
        {s.kueue_framework for s in KINDS if s.kueue_framework}, key=KUEUE_FRAMEWORKS.index)


# -- which namespaces Kueue manages (queues.kueueManagedJobsNamespaceSelector) --------------------

def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def in_namespace(doc: Obj, name: str) -> Obj:
    doc["metadata"]["namespace"] = name
    return doc


OPT_IN = policy_from_data({"queues": {"kueueManagedJobsNamespaceSelector": {
    "matchLabels": {"managed-by-kueue": "true"}}}})


@pytest.mark.parametrize("selector, labels, known, expected", [
    ({}, {}, None, True),
    (None, {}, None, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1"}, None, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, None, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, None, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, None, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, None, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, None, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, None, False),
    # a label not known: no answer, unless another requirement already fails
    ({"matchLabels": {"a": "1"}}, {}, ("b",), None),
    ({"matchLabels": {"a": "1", "b": "1"}}, {"b": "2"}, ("b",), False),
    ({"matchLabels": {"a": "1", "b": "1"}}, {"b": "1"}, ("b",), None),
])
def test_label_selectors_over_labels_known_in_part(selector: Obj | None, labels: dict[str, str],
                                                   known: tuple[str, ...] | None,
                                                   expected: bool | None) -> None:
    assert selects(requirements(selector), labels, known) is expected


@pytest.mark.parametrize("operator, values, value, expected", [
    ("Gt", ["3"], "4", True), ("Gt", ["3"], "3", False), ("Lt", ["3"], "-1", True),
    ("Gt", ["3"], "four", False), ("Gt", ["3"], None, False),     # as the API server's selector matches
    ("Gt", ["x"], "4", None), ("Gt", ["1", "2"], "4", None),      # refused by the API server
    ("In", [], "a", None), ("NotIn", [], None, None), ("Equals", ["a"], "a", None),
])
def test_one_requirement_on_a_label(operator: str, values: list[str], value: str | None,
                                    expected: bool | None) -> None:
    assert holds(operator, values, value) is expected


@pytest.mark.parametrize("selector", [
    {"matchExpressions": [{"key": "a", "operator": "In"}]},
    {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
    {"matchLabels": {"a": 1}},
    {"matchNames": ["ml"]},
    "ml",
])
def test_an_invalid_namespace_selector_is_refused_with_its_path(selector: Any) -> None:
    with pytest.raises(PolicyError, match="kueueManagedJobsNamespaceSelector"):
        policy_from_data({"queues": {"kueueManagedJobsNamespaceSelector": selector}})


def test_no_kueue_verdict_in_a_namespace_kueues_default_selector_leaves_out() -> None:
    """Kueue's default managedJobsNamespaceSelector leaves out kube-system and its own namespace: a
    job labelled there is not Kueue's (from Kueue 0.15), so neither its quota nor its LocalQueue
    is judged; null (Kueue's nil selector) manages every namespace."""
    objects = [flavor("a100"), local_queue(namespace="kueue-system"), local_queue(),
               cluster_queue("cq-a", {"a100": full(4)})]
    assert "GG402" in findings(job(8), objects)
    found = findings(in_namespace(job(8), "kueue-system"), objects)
    assert "GG402" not in found and "GG306" not in found and "GG406" not in found
    every = policy_from_data({"queues": {"kueueManagedJobsNamespaceSelector": None}})
    assert "GG402" in findings(in_namespace(job(8), "kueue-system"), objects, every)
    bad_name = in_namespace(labelled(batch_job(1, 1), "ML_Team"), "kueue-system")
    assert not [f for f in evaluate(bad_name, Policy()).findings if f.rule == "GG304"]
    assert [f.rule for f in evaluate(bad_name, every).findings if f.rule == "GG304"] == ["GG304"]


def test_an_opt_in_selector_is_matched_against_the_namespaces_labels() -> None:
    """Kueue manages only the namespaces labelled managed-by-kueue=true: a job beyond its quota is
    refused there, and runs unqueued in a namespace not opted in, whatever its label."""
    objects = [flavor("a100"), local_queue(namespace="opted"), local_queue(namespace="plain"),
               cluster_queue("cq-a", {"a100": full(4)}), namespace("opted", **{"managed-by-kueue": "true"}),
               namespace("plain")]
    assert findings(in_namespace(job(8), "opted"), objects, OPT_IN)["GG402"]
    assert not findings(in_namespace(job(8), "plain"), objects, OPT_IN)
    # nor is a LocalQueue missing there any wait of Kueue's
    assert "GG306" in findings(in_namespace(job(1, queue="gone"), "opted"), objects, OPT_IN)
    assert not findings(in_namespace(job(1, queue="gone"), "plain"), objects, OPT_IN)
    # the label comes, and the namespace's jobs are Kueue's
    relabelled = [*objects[:-1], namespace("plain", **{"managed-by-kueue": "true"})]
    assert findings(in_namespace(job(8), "plain"), relabelled, OPT_IN)["GG402"]


def test_a_namespace_not_seen_is_judged_both_ways_and_unknown_where_they_differ() -> None:
    """The snapshot holds no Namespace `unseen`: Kueue may or may not manage it. Beyond the quota
    (never through Kueue, fits without) the answer is unknown, not a refusal; a job the nodes can
    never hold is never either way; one that needs the flavor's tolerations (Kueue adds them to the
    pods it admits) fits through Kueue and never without: unknown, not GG403."""
    objects = [flavor("a100"), local_queue(namespace="unseen"), cluster_queue("cq-a", {"a100": full(4)})]
    found = findings(in_namespace(job(8), "unseen"), objects, OPT_IN)
    assert list(found) == ["GG406"] and "whether Kueue manages namespace `unseen`" in found["GG406"][0]
    assert "never through Kueue LocalQueue `team`" in found["GG406"][0]
    assert "fits without Kueue" in found["GG406"][0]
    never = findings(in_namespace(job(64, pods=2), "unseen"), objects, OPT_IN)
    assert list(never) == ["GG402"], never
    assert never["GG402"][0].startswith("error: insufficient quota for nvidia.com/gpu in flavor `a100`")
    assert "(if Kueue manages namespace `unseen`; if not: " in never["GG402"][0]
    assert not findings(in_namespace(job(2), "unseen"), objects, OPT_IN)
    # a name the selector reads alone needs no Namespace: the default selector's
    assert "GG402" in findings(in_namespace(job(8), "unseen"), objects)
    nodes = [node(f"s{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"}, {USAGE: "training", "pool": "spot"},
                  [SPOT]) for i in range(2)]
    tolerate = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    spot = [*nodes, rich_flavor("spot", {"pool": "spot"}, taints=[SPOT], tolerations=tolerate),
            local_queue(namespace="unseen"), cluster_queue("cq-a", {"spot": full(16)})]
    assert not kueue_findings(in_namespace(job(8), "unseen"), spot)
    assert "GG403" in kueue_findings(in_namespace(job(8), "unseen"),
                                     [*spot, namespace("unseen")], OPT_IN)
    unknown = kueue_findings(in_namespace(job(8), "unseen"), spot, OPT_IN)
    assert list(unknown) == ["GG406"], unknown
    # GG304 cannot tell either, without the namespace's labels: not judged
    bad_name = in_namespace(labelled(batch_job(1, 1), "ML_Team"), "unseen")
    assert not [f for f in evaluate(bad_name, OPT_IN).findings if f.rule == "GG304"]


def test_an_unknown_answer_either_way_is_no_never(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked both ways, one answer unknown (a budget spent, say): the whole is unknown, whatever
    the other says."""
    objects = [flavor("a100"), local_queue(namespace="unseen"), cluster_queue("cq-a", {"a100": full(4)})]
    question = question_of(in_namespace(job(8), "unseen"), OPT_IN)
    assert question.kueue_namespaces
    asked = check.check_cluster

    def answer(through: Verdict, without: Verdict) -> Outcome:
        def fake(q: FitQuestion, *args: Any, **kwargs: Any) -> Outcome:
            if q.kueue_namespaces:
                return asked(q, *args, **kwargs)
            kueue = any(r.system == "kueue" for r in q.scheduler_queues)
            return Outcome("c1", through if kueue else without, Cause.BUDGET_SPENT, "spent")
        monkeypatch.setattr(check, "check_cluster", fake)
        try:
            return check.check_cluster(question, snapshot([*gpu_nodes(), *objects], OPT_IN), OPT_IN)
        finally:
            monkeypatch.setattr(check, "check_cluster", asked)

    assert answer(Verdict.NEVER, Verdict.UNKNOWN).verdict is Verdict.UNKNOWN
    assert answer(Verdict.UNKNOWN, Verdict.NEVER).verdict is Verdict.UNKNOWN
    assert answer(Verdict.NEVER, Verdict.NEVER).verdict is Verdict.NEVER
    assert answer(Verdict.NEVER, Verdict.FITS).cause is Cause.KUEUE_NAMESPACE_UNKNOWN


def test_a_required_queue_is_one_kueue_reads() -> None:
    """queues.require: a Kueue label Kueue ignores (integration off, namespace it does not manage)
    names no queue that enforces anything (GG305); one whose reading hangs on namespace labels
    not known counts."""
    def gg305(doc: Obj, **queues: Any) -> list[str]:
        policy = policy_from_data({"queues": {"require": True, **queues}})
        return [f.message for f in evaluate(doc, policy).findings if f.rule == "GG305"]

    assert gg305(labelled(batch_job(1, 1))) == []
    assert gg305(in_namespace(labelled(batch_job(1, 1)), "kueue-system")) == [
        "requests GPUs but names no queue Kueue reads: it ignores queue 'team' here "
        "(queues.kueueFrameworks, queues.kueueManagedJobsNamespaceSelector); the policy requires one "
        "(queues.require)"]
    assert gg305(labelled(batch_job(1, 1)), kueueFrameworks=["pod"])
    opt_in = {"matchLabels": {"managed-by-kueue": "true"}}
    assert gg305(labelled(batch_job(1, 1)), kueueManagedJobsNamespaceSelector=opt_in) == []
    unlabelled = batch_job(1, 1)
    del unlabelled["metadata"]["labels"]
    assert gg305(unlabelled)[0].startswith("requests GPUs but names no queue")


def test_namespaces_are_watched_objects_of_the_topology() -> None:
    """Namespace events keep their labels; a relist drops the namespaces gone."""
    topo = Topology.from_objects([namespace("a", team="x"), namespace("b")])
    assert topo.namespace_labels["a"] == {"kubernetes.io/metadata.name": "a", "team": "x"}
    topo.apply("MODIFIED", namespace("a"))
    assert topo.namespace_labels["a"] == {"kubernetes.io/metadata.name": "a"}
    topo.replace_all("Namespace", [namespace("b")])
    assert set(topo.namespace_labels) == {"b"} and topo.counts()["Namespace"] == 1
    topo.apply("ADDED", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "c", "labels": "x"}})
    assert topo.namespace_labels["c"] == {}


# -- which namespaces a ClusterQueue admits workloads from (its spec.namespaceSelector) ---------------

def selecting(selector: Any, *extra: Obj) -> list[Obj]:
    """A LocalQueue `team` in `ml` pointing at ClusterQueue cq-a (4 GPUs) whose namespaceSelector is
    ``selector`` (None: none at all)."""
    return [flavor("a100"), local_queue(),
            cluster_queue("cq-a", {"a100": full(4)}, namespaceSelector=selector), *extra]


# Selector-like objects, valid and not: what a hand-written snapshot may hold.
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "a", "In", "x"]))
_VALUES = st.one_of(_SCALARS, st.lists(st.one_of(st.sampled_from(["1", "2"]), _SCALARS), max_size=3))
_EXPRESSION = st.one_of(_SCALARS, st.dictionaries(
    st.sampled_from(["key", "operator", "values", "extra"]),
    st.one_of(st.sampled_from(["a", "b", "", "In", "NotIn", "Exists", "DoesNotExist", "Gt"]), _VALUES),
    max_size=4))
_KEYS = st.sampled_from(["a", "b"])
_WELL_FORMED = st.one_of(
    st.fixed_dictionaries({"key": _KEYS, "operator": st.sampled_from(["In", "NotIn"]),
                           "values": st.lists(st.sampled_from(["1", "2"]), min_size=1, max_size=2)}),
    st.fixed_dictionaries({"key": _KEYS, "operator": st.sampled_from(["Exists", "DoesNotExist"])},
                          optional={"values": st.just([])}))
_EXPRESSION = st.one_of(_WELL_FORMED, _EXPRESSION)
_SELECTOR = st.one_of(_SCALARS, st.dictionaries(
    st.sampled_from(["matchLabels", "matchExpressions", "matchNames"]),
    st.one_of(_SCALARS, st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(_SCALARS, st.just("1")),
                                        max_size=2),
              st.lists(_EXPRESSION, max_size=3), st.lists(_WELL_FORMED, min_size=1, max_size=2)),
    max_size=3))


@settings(max_examples=400, deadline=None)
@given(_SELECTOR)
def test_a_selector_read_from_a_cluster_object_is_valid_as_the_policy_schema_says(selector: Any) -> None:
    """The snapshot's reader (plain Python) and the policy's schema (jsonschema) agree on which
    selectors the API server accepts, and a valid one reads as :func:`requirements` reads it."""
    valid = jsonschema.Draft202012Validator(SELECTOR_SCHEMA).is_valid(selector)
    read = read_selector(selector)
    assert (read is not None) == valid, (selector, read)
    if valid:
        assert read == requirements(selector)


def test_a_cluster_queue_without_a_namespace_selector_admits_nothing() -> None:
    """Kueue reads a nil namespaceSelector as selecting no namespace: every workload is held
    ("Workload namespace doesn't match ClusterQueue selector"), a wait (GG306), not a refusal; what
    the quota can never admit is still never."""
    found = findings(job(2), selecting(None))
    assert list(found) == ["GG306"], found
    assert found["GG306"] == [
        "warning: ClusterQueue `cq-a` has no namespaceSelector, which selects no namespace: Kueue admits "
        "nothing through it (`{}` selects all)"]
    assert not findings(job(2), selecting({}))
    assert list(findings(job(8), selecting(None))) == ["GG402"]


@pytest.mark.parametrize("selector, labels, held", [
    ({"matchLabels": {"kubernetes.io/metadata.name": "ml"}}, None, False),
    ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["prod"]}]},
     None, True),                                   # the name alone decides: no Namespace needed
    ({"matchLabels": {"tier": "research"}}, {"tier": "research"}, False),
    ({"matchLabels": {"tier": "research"}}, {"tier": "prod"}, True),
    ({"matchLabels": {"tier": "research"}}, {}, True),
    ({"matchLabels": {"tier": "research"}}, None, False),    # labels not seen: nothing said
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, None, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, {}, False),  # invalid
    ("ml", {}, False),                                                                        # invalid
])
def test_a_cluster_queue_holds_workloads_of_namespaces_it_does_not_select(
        selector: Any, labels: dict[str, str] | None, held: bool) -> None:
    extra = [] if labels is None else [namespace("ml", **labels)]
    found = findings(job(2), selecting(selector, *extra))
    if held:
        assert found == {"GG306": [
            "warning: namespace `ml` not selected by ClusterQueue `cq-a`'s namespaceSelector: Kueue holds "
            "the workload until its labels or the selector change"]}
    else:
        assert not found, found


def test_a_namespace_relabelled_moves_the_answer_though_the_quota_answer_is_kept() -> None:
    """The namespace's labels have no version: the hold is read on every review, outside the
    outcome memo, so a label that comes (or goes) counts at once."""
    policy = Policy()
    cluster = snapshot([*gpu_nodes(), *selecting({"matchLabels": {"tier": "research"}}, namespace("ml"))],
                       policy)

    def gg306() -> list[str]:
        found = feasibility_findings(run(job(2), [cluster], policy, in_a_minute()))
        return found.get("GG306", [])

    assert gg306()
    cluster.topology.apply("MODIFIED", namespace("ml", tier="research"))
    assert not gg306()
    cluster.topology.apply("MODIFIED", namespace("ml"))
    assert gg306()


def test_a_cluster_queue_selector_reads_only_the_queue_the_workload_names() -> None:
    """An UPDATE that keeps its queue (the workload is admitted already) and a manifest without a
    namespace are not held; nor is a job whose LocalQueue points at another ClusterQueue."""
    no_namespace = job(2)
    del no_namespace["metadata"]["namespace"]
    assert "GG306" not in findings(no_namespace, selecting(None))
    other = [*selecting(None)[:1], local_queue(cq="cq-b"), cluster_queue("cq-a", {"a100": full(4)},
                                                                         namespaceSelector=None),
             cluster_queue("cq-b", {"a100": full(4)})]
    assert not findings(job(2), other)
    policy = Policy()
    cluster = snapshot([*gpu_nodes(), *selecting(None)], policy)
    update = evaluate(job(3), policy, [cluster], previous=job(2), deadline=in_a_minute())
    assert not feasibility_findings(update), "its queue is kept: not judged again"


# -- ResourceFlavors' nodes: which flavors Kueue tries, and whether their nodes hold the pods ------------

def rich_flavor(name: str, labels: dict[str, str] | None = None, taints: list[Obj] | None = None,
                tolerations: list[Obj] | None = None, topology: str | None = None) -> Obj:
    spec: Obj = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = taints
    if tolerations:
        spec["tolerations"] = tolerations
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def kueue_topology(name: str, *levels: str) -> Obj:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def placed(doc: Obj, **spec: Any) -> Obj:
    """``doc`` with ``spec`` (nodeSelector, tolerations, affinity) in every pod template."""
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"].update(spec)
    return doc


def annotated(doc: Obj, **annotations: str) -> Obj:
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"] = {"annotations": {f"kueue.x-k8s.io/{k.replace('_', '-')}": v
                                                           for k, v in annotations.items()}}
    return doc


TYPE = "gpu.example.com/type"
SPOT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
TWO_FLAVORS = [rich_flavor("a100", {TYPE: "a100"}), rich_flavor("h100", {TYPE: "h100"}), local_queue(),
               cluster_queue("cq-a", {"a100": full(4), "h100": full(16)})]


def typed_nodes() -> list[Obj]:
    return [node(f"{kind}-{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"}, {USAGE: "training", TYPE: kind})
            for kind in ("a100", "h100") for i in range(2)]


def kueue_findings(doc: Obj, objects: list[Obj], policy: Policy | None = None) -> dict[str, list[str]]:
    pol = policy or Policy()
    return feasibility_findings(run(doc, [snapshot(objects, pol)], pol, in_a_minute()))


def test_quota_counts_only_the_flavors_kueue_tries_for_the_pod_set() -> None:
    objects = [*typed_nodes(), *TWO_FLAVORS]
    assert "GG402" not in kueue_findings(job(8), objects), "h100 holds 8"
    assert "GG402" not in kueue_findings(placed(job(8), nodeSelector={TYPE: "h100"}), objects)
    found = kueue_findings(placed(job(8), nodeSelector={TYPE: "a100"}), objects)
    assert found["GG402"] == ["error: insufficient quota for nvidia.com/gpu in flavor `a100`: 8 asked by pod "
                              "set Master > maximum capacity 4 of ClusterQueue `cq-a`"]
    # a key no flavor labels is not Kueue's to compare
    assert "GG402" not in kueue_findings(placed(job(8), nodeSelector={"other": "x"}), objects)


def test_no_flavor_tried_is_never_in_kueues_words() -> None:
    objects = [*typed_nodes(), *TWO_FLAVORS]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": TYPE, "operator": "In", "values": ["b200"]}]}]}}}
    assert kueue_findings(placed(job(1), affinity=affinity), objects)["GG402"] == [
        "error: no flavor of ClusterQueue `cq-a` is tried for pod set Master: flavor a100 doesn't match "
        "node affinity; flavor h100 doesn't match node affinity"]
    # a term without the flavors' keys drops the whole affinity (flavorSelector)
    either = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": TYPE, "operator": "In", "values": ["b200"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}
    assert "GG402" not in kueue_findings(placed(job(1), affinity=either), objects)


def test_untolerated_flavor_taint_and_the_flavors_own_tolerations() -> None:
    nodes = [node(f"s{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"}, {USAGE: "training", "pool": "spot"},
                  [SPOT]) for i in range(2)]
    queue = [local_queue(), cluster_queue("cq-a", {"spot": full(16)})]
    tainted = [*nodes, rich_flavor("spot", {"pool": "spot"}, taints=[SPOT]), *queue]
    assert kueue_findings(job(8), tainted)["GG402"] == [
        "error: no flavor of ClusterQueue `cq-a` is tried for pod set Master: untolerated taint "
        "spot=true:NoSchedule in flavor spot"]
    tolerate = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    assert not kueue_findings(placed(job(8), tolerations=tolerate), tainted)
    # the flavor's tolerations count for the flavor, and Kueue adds them to the admitted pods
    tolerated = [*nodes, rich_flavor("spot", {"pool": "spot"}, taints=[SPOT], tolerations=tolerate), *queue]
    assert not kueue_findings(job(8), tolerated)
    # without them, the pods never pass the nodes' taint (the node check proper)
    assert "GG403" in kueue_findings(job(8), [*nodes, rich_flavor("spot", {"pool": "spot"}), *queue])


def test_a_pod_set_that_no_flavors_nodes_hold_never_runs() -> None:
    """Kueue admits through flavor a100 only; a100 nodes have 8 GPUs, h100 nodes 16: a pod of 16
    fits the cluster, not the nodes its flavor puts it on."""
    nodes = [*typed_nodes(), node("h100-big", {"cpu": "64", "memory": "512Gi", GPU: "16"},
                                  {USAGE: "training", TYPE: "h100"})]
    objects = [*nodes, rich_flavor("a100", {TYPE: "a100"}), local_queue(),
               cluster_queue("cq-a", {"a100": full(24)})]
    assert kueue_findings(job(16), objects)["GG403"] == [
        "error: pod set Master never runs on the nodes of ClusterQueue `cq-a`'s flavors: flavor `a100`: its "
        "nodes hold 0 of 1 pod(s) even empty"]
    assert "GG403" not in kueue_findings(job(8), objects)
    with_h100 = [*nodes, *TWO_FLAVORS[:2], local_queue(),
                 cluster_queue("cq-a", {"a100": full(24), "h100": full(24)})]
    assert "GG403" not in kueue_findings(job(16), with_h100), "h100's nodes hold it"
    # a flavor whose labels no node carries: its pods never run, unless nodes may come
    ghost = [*typed_nodes(), rich_flavor("b200", {TYPE: "b200"}), local_queue(),
             cluster_queue("cq-a", {"b200": full(16)})]
    assert "GG403" in kueue_findings(job(1), ghost)
    autoscaling = policy_from_data({"feasibility": {"autoscaling": True}})
    assert "GG403" not in kueue_findings(job(1), ghost, autoscaling)


def gang(gpus: int, pods: int) -> Obj:
    """A gang of ``pods`` pods (Volcano schedules them) of ``gpus`` GPUs each, in one pod set."""
    doc = placed(job(gpus), schedulerName="volcano")
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = pods
    return doc


BLOCK, HOST = "cloud.example.com/block", "kubernetes.io/hostname"


def block_nodes(blocks: int = 3, per_block: int = 2) -> list[Obj]:
    return [node(f"b{b}-{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"},
                 {USAGE: "training", BLOCK: f"b{b}", HOST: f"b{b}-{i}"})
            for b in range(blocks) for i in range(per_block)]


TAS = [kueue_topology("default", BLOCK, HOST), rich_flavor("tas", topology="default"), local_queue(),
       cluster_queue("cq-a", {"tas": full(64)})]


def test_required_topology_fits_one_domain_or_never() -> None:
    objects = [*block_nodes(), *TAS]
    assert "GG403" not in kueue_findings(annotated(gang(8, 2), podset_required_topology=BLOCK), objects)
    assert kueue_findings(annotated(gang(8, 3), podset_required_topology=BLOCK), objects)["GG403"] == [
        "error: pod set Master never runs on the nodes of ClusterQueue `cq-a`'s flavors: flavor `tas`: "
        "topology \"default\" allows to fit only 2 out of 3 pod(s) in one cloud.example.com/block domain "
        "even empty"]
    assert "GG403" not in kueue_findings(gang(8, 3), objects), "without the annotation: any 3 nodes"
    # preferred and unconstrained never give never; nor does a flavor without a Topology
    assert "GG403" not in kueue_findings(annotated(gang(8, 3), podset_preferred_topology=BLOCK), objects)
    assert "GG403" not in kueue_findings(annotated(gang(8, 3), podset_unconstrained_topology="true"), objects)
    plain = [*block_nodes(), flavor("tas"), *TAS[2:]]
    assert "GG403" not in kueue_findings(annotated(gang(8, 3), podset_required_topology=BLOCK), plain)


def test_a_level_the_topology_lacks_is_no_candidate() -> None:
    found = kueue_findings(annotated(gang(8, 1), podset_required_topology="rack"), [*block_nodes(), *TAS])
    assert found["GG402"] == ["error: no flavor of ClusterQueue `cq-a` is tried for pod set Master: "
                              "Flavor \"tas\" does not contain the requested level"]


def test_slices_each_fit_one_domain_of_their_level() -> None:
    """Blocks of 2 racks of 2 nodes (8 GPUs each); a pod set of 4 x 8 GPUs in one block, slices of 2
    in one rack each: fits; slices of 4 in one rack: never (a rack holds 2)."""
    rack = "cloud.example.com/rack"
    nodes = [node(f"n{b}{r}{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"},
                  {USAGE: "training", BLOCK: f"b{b}", rack: f"b{b}r{r}", HOST: f"n{b}{r}{i}"})
             for b in range(2) for r in range(2) for i in range(2)]
    objects = [*nodes, kueue_topology("default", BLOCK, rack, HOST), *TAS[1:]]

    def worker_gang(slice_size: str) -> Obj:
        return annotated(gang(8, 4), podset_required_topology=BLOCK, podset_slice_required_topology=rack,
                         podset_slice_size=slice_size)

    assert "GG403" not in kueue_findings(worker_gang("2"), objects)
    assert kueue_findings(worker_gang("4"), objects)["GG403"] == [
        "error: pod set Master never runs on the nodes of ClusterQueue `cq-a`'s flavors: flavor `tas`: "
        "topology \"default\" allows to fit only 0 out of 1 slice(s) of 4 pods (cloud.example.com/rack) in "
        "one cloud.example.com/block domain even empty"]


def test_flavor_and_topology_changes_move_the_answer() -> None:
    policy = Policy()
    cluster = snapshot([*block_nodes(), *TAS], policy)
    doc = annotated(gang(8, 3), podset_required_topology=BLOCK)
    assert "GG403" in feasibility_findings(evaluate(doc, policy, [cluster]))
    cluster.topology.apply("ADDED", node("b0-9", {"cpu": "64", "memory": "512Gi", GPU: "8"},
                                         {USAGE: "training", BLOCK: "b0", HOST: "b0-9"}))
    assert "GG403" not in feasibility_findings(evaluate(doc, policy, [cluster]))
    cluster.topology.apply("MODIFIED", node("b0-9", {"cpu": "64", "memory": "512Gi", GPU: "8"},
                                            {USAGE: "training", BLOCK: "b9", HOST: "b0-9"}))
    assert "GG403" in feasibility_findings(evaluate(doc, policy, [cluster])), "a label change moves it"
    cluster.topology.apply("MODIFIED", kueue_topology("default", HOST))
    assert "GG402" in feasibility_findings(evaluate(doc, policy, [cluster])), "the level is gone"


# -- brute force: flavors' labels, taints and tolerations, and one-domain topology ------------------------

def _node_ok(labels: dict[str, str], taints: list[Obj], selector: dict[str, str], tolerations: list[Obj],
             flavor_labels: dict[str, str]) -> bool:
    """A node takes a pod of ``selector``/``tolerations`` admitted to a flavor of ``flavor_labels``."""
    wanted = {**selector, **flavor_labels}
    tolerated = {(t["key"], t.get("value")) for t in tolerations}
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        (t["key"], t["value"]) in tolerated or (t["key"], None) in tolerated for t in taints)


def _brute_force_runs(nodes: list[tuple[dict[str, str], list[Obj], int]],
                      flavors: list[tuple[str, dict[str, str], list[Obj], list[Obj]]],
                      selector: dict[str, str], tolerations: list[Obj], required: bool, pods: int,
                      per_pod: int) -> bool:
    """Some flavor Kueue tries (its taints tolerated, its labels matching the selector's keys it has)
    has nodes for every pod, in one block when ``required``: every placement tried."""
    for _, flavor_labels, flavor_taints, own in flavors:
        tolerated = {t["key"] for t in [*tolerations, *own]}
        if not all(t["key"] in tolerated for t in flavor_taints) or not all(
                flavor_labels[k] == v for k, v in selector.items() if k in flavor_labels):
            continue
        tolerating = [*tolerations, *own]
        slots = [gpus // per_pod if _node_ok(labels, taints, selector, tolerating, flavor_labels) else 0
                 for labels, taints, gpus in nodes]
        for choice in itertools.product(range(len(nodes)), repeat=pods):
            if all(choice.count(n) <= slots[n] for n in set(choice)) and (
                    not required or len({nodes[n][0][BLOCK] for n in choice}) == 1):
                return True
    return False


def test_flavor_nodes_never_only_when_no_placement_exists_brute_force() -> None:
    """Random small clusters (nodes with a type, a block and maybe a taint), flavors (type labels,
    taints, tolerations) and a pod set (a selector, tolerations, maybe one block required), quota
    plentiful: gpugate's never (GG402/GG403) holds exactly when no candidate flavor has nodes for all
    the pods (one block, when required), as brute force over every placement finds."""
    rng = random.Random(2026)
    types, blocks = ["a", "b"], ["x", "y"]
    for _ in range(120):
        nodes: list[tuple[dict[str, str], list[Obj], int]] = []
        objects: list[Obj] = [kueue_topology("t", BLOCK, HOST), local_queue()]
        for i in range(rng.randint(1, 4)):
            labels = {USAGE: "training", TYPE: rng.choice(types), BLOCK: rng.choice(blocks),
                      HOST: f"n{i}"}
            taints = [dict(SPOT)] if rng.random() < 0.3 else []
            gpus = rng.choice([1, 2, 4])
            nodes.append((labels, taints, gpus))
            objects.append(node(f"n{i}", {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}, labels, taints))
        flavors: list[tuple[str, dict[str, str], list[Obj], list[Obj]]] = []
        for f in range(rng.randint(1, 2)):
            labels = {TYPE: rng.choice(types)} if rng.random() < 0.8 else {}
            taints = [dict(SPOT)] if rng.random() < 0.3 else []
            tolerations = [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}] \
                if rng.random() < 0.4 else []
            flavors.append((f"f{f}", labels, taints, tolerations))
            objects.append(rich_flavor(f"f{f}", labels, taints, tolerations, topology="t"))
        objects.append(cluster_queue("cq-a", {name: full(64) for name, *_ in flavors}))
        selector = {TYPE: rng.choice(types)} if rng.random() < 0.5 else {}
        tolerations = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}] \
            if rng.random() < 0.4 else []
        required = rng.random() < 0.5
        pods, per_pod = rng.randint(1, 3), rng.choice([1, 2])
        doc = gang(per_pod, pods)
        placed(doc, **({"nodeSelector": selector} if selector else {}),
               **({"tolerations": tolerations} if tolerations else {}))
        if required:
            annotated(doc, podset_required_topology=BLOCK)

        runs = _brute_force_runs(nodes, flavors, selector, tolerations, required, pods, per_pod)
        found = kueue_findings(doc, objects)
        never = "GG402" in found or "GG403" in found
        assert never != runs, (nodes, flavors, selector, tolerations, required, pods, per_pod, found)


# -- now: the nodes of the flavors Kueue may admit a workload to --------------------------------------

def busy(node_name: str, gpus: int, name: str) -> Obj:
    return pod(name, node_name, {GPU: str(gpus)}, namespace="other")


def test_a_workload_not_admitted_yet_waits_when_its_flavors_nodes_are_busy() -> None:
    """The flavor pins the pods to the h100 nodes, its tolerations open the spot nodes as well:
    with the h100 nodes busy, the free spot nodes are none Kueue places the pods on."""
    spot = [node(f"spot-{i}", {"cpu": "64", "memory": "512Gi", GPU: "8"}, {USAGE: "training", TYPE: "spot"},
                 [SPOT]) for i in range(2)]
    tolerate = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    objects = [*typed_nodes(), *spot, rich_flavor("h100", {TYPE: "h100"}, tolerations=tolerate),
               local_queue(), cluster_queue("cq-a", {"h100": full(64)})]
    assert not kueue_findings(job(8, pods=2), objects), "two free h100 nodes"
    one_busy = [*objects, busy("h100-0", 8, "hog")]
    found = kueue_findings(job(8, pods=2), one_busy)
    assert list(found) == ["GG404"]
    assert found["GG404"][0].endswith("(on the nodes of the Kueue flavors it may be admitted to)"), found
    assert not kueue_findings(job(8, pods=1), one_busy), "one h100 node is free"
    # a flavor that pins nothing leaves the pods their own nodes (the spot ones need its toleration)
    plain = [*typed_nodes(), flavor("any"), local_queue(), cluster_queue("cq-a", {"any": full(64)})]
    assert not kueue_findings(job(8, pods=2), [*plain, busy("h100-0", 8, "hog")]), "a100 nodes are free"


def _brute_force_fits_now(nodes: list[tuple[dict[str, str], list[Obj], int, int]],
                          flavors: list[tuple[str, dict[str, str], list[Obj], list[Obj]]],
                          selector: dict[str, str], tolerations: list[Obj], pods: int, per_pod: int) -> bool:
    """The pods fit the free GPUs of the nodes of the flavors Kueue tries, taken together (each pod on
    a node some tried flavor puts it on), every placement tried."""
    slots = [0] * len(nodes)
    every = [own for _, _, _, own in flavors for own in own]   # the node check grants every flavor's
    for _, flavor_labels, flavor_taints, own in flavors:
        tolerated = {t["key"] for t in [*tolerations, *own]}
        if not all(t["key"] in tolerated for t in flavor_taints) or not all(
                flavor_labels[k] == v for k, v in selector.items() if k in flavor_labels):
            continue
        for n, (labels, taints, gpus, used) in enumerate(nodes):
            if _node_ok(labels, taints, selector, [*tolerations, *every], flavor_labels):
                slots[n] = (gpus - used) // per_pod
    return any(all(choice.count(n) <= slots[n] for n in set(choice))
               for choice in itertools.product(range(len(nodes)), repeat=pods))


def test_waits_on_the_flavors_nodes_only_when_no_placement_exists_brute_force() -> None:
    """Random small clusters with GPUs in use, flavors and a pod set, quota plentiful: when the
    empty cluster holds the gang, gpugate's wait for room (GG404) holds exactly when no placement
    of every pod on the free GPUs of a tried flavor's nodes exists, as brute force finds; it never
    says never where brute force finds room on the empty nodes."""
    rng = random.Random(1126)
    waits_seen = fits_seen = 0
    for _ in range(150):
        nodes: list[tuple[dict[str, str], list[Obj], int, int]] = []
        objects: list[Obj] = [local_queue()]
        for i in range(rng.randint(1, 4)):
            labels = {USAGE: "training", TYPE: rng.choice(["a", "b"]), HOST: f"n{i}"}
            taints = [dict(SPOT)] if rng.random() < 0.3 else []
            gpus = rng.choice([2, 4])
            used = rng.choice([0, 0, 1, 2, gpus])
            nodes.append((labels, taints, gpus, used))
            objects.append(node(f"n{i}", {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}, labels, taints))
            if used:
                objects.append(busy(f"n{i}", used, f"hog-{i}"))
        flavors: list[tuple[str, dict[str, str], list[Obj], list[Obj]]] = []
        for f in range(rng.randint(1, 2)):
            labels = {TYPE: rng.choice(["a", "b"])} if rng.random() < 0.8 else {}
            tolerations = [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}] \
                if rng.random() < 0.4 else []
            flavors.append((f"f{f}", labels, [], tolerations))
            objects.append(rich_flavor(f"f{f}", labels, None, tolerations))
        objects.append(cluster_queue("cq-a", {name: full(64) for name, *_ in flavors}))
        selector = {TYPE: rng.choice(["a", "b"])} if rng.random() < 0.4 else {}
        tolerations = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}] \
            if rng.random() < 0.3 else []
        pods, per_pod = rng.randint(1, 3), rng.choice([1, 2])
        doc = gang(per_pod, pods)
        placed(doc, **({"nodeSelector": selector} if selector else {}),
               **({"tolerations": tolerations} if tolerations else {}))

        empty = [(labels, taints, gpus, 0) for labels, taints, gpus, _ in nodes]
        found = kueue_findings(doc, objects)
        if not _brute_force_fits_now(empty, flavors, selector, tolerations, pods, per_pod):
            assert set(found) & {"GG402", "GG403"}, (nodes, flavors, selector, tolerations, pods, found)
            continue
        assert not set(found) & {"GG402", "GG403"}, (nodes, flavors, selector, tolerations, pods, found)
        fits_now = _brute_force_fits_now(nodes, flavors, selector, tolerations, pods, per_pod)
        assert ("GG404" in found) != fits_now, (nodes, flavors, selector, tolerations, pods, per_pod, found)
        waits_seen += not fits_now
        fits_seen += fits_now
    assert waits_seen > 10 and fits_seen > 10, (waits_seen, fits_seen)
