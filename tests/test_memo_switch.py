"""Memoisation changes no verdict: the suite's verdicts with every memo on and with all off.

``policies.memo`` is the one seam through which gpugate keeps derived values (per review,
per snapshot version, per process), and ``GPUGATE_MEMO=off`` turns every store off. Here
the verdict-bearing inputs of the suite are judged both ways and compared, finding for
finding and patch for patch:

- every rule's documented examples (with their policy and cluster blocks), the example
  manifests and the corpus of real manifests (when ``../shared`` is present), through the
  linter's pipeline;
- seeded random clusters that change between reviews (node, pod, queue, pod group, quota
  tree and HyperNode events, relabelled nodes) and jobs of a few shapes asked again and
  again, CREATEs and UPDATEs, through the engine: what makes caches hit and go stale;

with memo on (cold, then warm in the same process) and with memo off (a process of its
own), and the verdict-heavy test modules run again with memo off.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lint.cli import Report, lint_text
from policies import memo
from policies.config import Policy, policy_from_data
from policies.engine import evaluate
from policies.registry import all_rules
from policies.snapshots import snapshot_from_text
from policies.topology import ClusterSnapshot, Topology

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = ROOT.parent / "shared" / "corpus"
GPU = "metax-tech.com/gpu"
USAGE = "maip.mxsf.io/node.usage"
CLIQUE = "nvidia.com/gpu.clique"
Obj = dict[str, Any]


def _report_lines(report: Report) -> list[str]:
    return [f"{loc.finding.rule} {loc.finding.severity} {loc.finding.path} {loc.line}:{loc.column} "
            f"{loc.finding.message}" for loc in report.findings]


def _lint(text: str | bytes, name: str, policy: Policy, clusters: list[ClusterSnapshot] | None) -> list[str]:
    report = Report()
    lint_text(text, name, policy, report, clusters)
    return [name, *_report_lines(report)]


def rule_example_verdicts() -> Iterator[list[str]]:
    for rule in all_rules().values():
        blocks = {role: [e.text for e in rule.examples if e.role == role] for role in ("policy", "cluster")}
        policy = policy_from_data(yaml.safe_load(blocks["policy"][0])) if blocks["policy"] else Policy()
        clusters = [snapshot_from_text(blocks["cluster"][0], policy)] if blocks["cluster"] else None
        for i, example in enumerate(e for e in rule.examples if e.role in ("pass", "fail")):
            yield _lint(example.text, f"{rule.id}-{i}", policy, clusters)


def manifest_verdicts() -> Iterator[list[str]]:
    policy = Policy()
    cluster_file = ROOT / "examples" / "cluster" / "cluster.yaml"
    clusters = [snapshot_from_text(cluster_file.read_text(), policy)]
    files = sorted((ROOT / "examples").rglob("*.yaml"))
    if CORPUS.is_dir():
        files += sorted(p for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml"))
    for path in files:
        text = path.read_bytes()
        yield _lint(text, str(path.relative_to(path.parents[1])), policy, None)
        if "examples" in path.parts:
            yield _lint(text, f"{path.name} with cluster", policy, clusters)


# -- seeded random clusters, events and jobs ----------------------------------------------


def _node(rng: random.Random, name: str) -> Obj:
    usage = rng.choice(["training", "inference", "hybrid"])
    labels = {USAGE: usage, **{k: rng.choice(v) for k, v in
                              (("zone", ["a", "b"]), (CLIQUE, ["s0", "s1"]), ("rack", ["r0", "r1"]))
                              if rng.random() < 0.6}}
    taints = [{"key": USAGE, "value": usage, "effect": "NoSchedule"}]
    if rng.random() < 0.2:
        taints.append({"key": "dedicated", "value": rng.choice(["x", "y"]),
                       "effect": rng.choice(["NoSchedule", "NoExecute"])})
    spec: Obj = {"taints": taints}
    if rng.random() < 0.1:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"allocatable": {"cpu": str(rng.randint(0, 16)), "memory": f"{rng.randint(0, 64)}Gi",
                                       GPU: str(rng.choice([0, 4, 8, 8])), "pods": "110"}}}


def _pod(rng: random.Random, nodes: list[str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{rng.randint(0, 9)}", "namespace": "x"},
            "spec": {"nodeName": rng.choice(nodes), "containers": [{"name": "m", "resources": {
                "requests": {"cpu": str(rng.randint(0, 3)), GPU: str(rng.randint(0, 2))}}}]},
            "status": {"phase": rng.choice(["Running", "Running", "Pending", "Succeeded"])}}


def _queue(name: str, capability: Obj | None, state: str = "Open", parent: str | None = None) -> Obj:
    spec: Obj = {"weight": 1}
    if capability:
        spec["capability"] = capability
    if parent:
        spec["parent"] = parent
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec, "status": {"state": state}}


def _event(rng: random.Random, nodes: list[str]) -> tuple[str, Obj]:
    what = rng.choice(["node", "node", "pod", "pod", "queue", "podgroup", "quota", "hypernode"])
    if what == "node":
        obj = _node(rng, rng.choice(nodes))
    elif what == "pod":
        obj = _pod(rng, nodes)
    elif what == "queue":
        obj = _queue(rng.choice(["q1", "q2"]), {"cpu": str(rng.randint(0, 12)), GPU: str(rng.randint(0, 32))},
                     rng.choice(["Open", "Open", "Closed"]), rng.choice([None, "root"]))
    elif what == "podgroup":
        obj = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": f"pg{rng.randint(0, 2)}", "namespace": "x"},
               "spec": {"queue": rng.choice(["q1", "q2"]), "minMember": 1,
                        "minResources": {"cpu": str(rng.randint(0, 6))}},
               "status": {"phase": rng.choice(["Running", "Inqueue", "Pending"])}}
    elif what == "quota":
        obj = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
               "metadata": {"name": "tree", "namespace": "kube-system"},
               "spec": {"root": {"name": "root", "max": {"cpu": 1000}, "children": [
                   {"name": "team", "max": {"cpu": rng.randint(0, 20)}, "namespaces": [rng.choice("xy")]}]}}}
    else:
        selector = rng.choice([{"regexMatch": {"pattern": "n[0-2]"}},
                               {"labelMatch": {"matchLabels": {"rack": "r1"}}},
                               {"exactMatch": {"name": "n3"}}])
        obj = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
               "metadata": {"name": f"h{rng.randint(0, 1)}"},
               "spec": {"tier": rng.choice([1, 1, 2]), "members": [{"type": "Node", "selector": selector}]}}
    return rng.choice(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]), obj


def _job(rng: random.Random) -> Obj:
    tasks = []
    for t in range(rng.randint(1, 2)):
        gpus = rng.choice([0, 2, 4, 8])
        requests = {"cpu": str(rng.randint(0, 3))}
        if gpus:
            requests[GPU] = str(gpus)
        spec: Obj = {"containers": [{"name": "m", "image": "x",
                                     "resources": {"requests": requests, "limits": dict(requests)}}]}
        if rng.random() < 0.3:
            spec["tolerations"] = [rng.choice([{"key": "dedicated", "operator": "Equal", "value": "x",
                                                "effect": "NoSchedule"}, {"operator": "Exists"}])]
        if rng.random() < 0.25:
            spec["nodeSelector"] = {"zone": rng.choice("ab")}
        template: Obj = {"spec": spec}
        if gpus and rng.random() < 0.5:
            size = str(gpus * rng.choice([1, 2]))
            template["metadata"] = {"annotations": {"metax-tech.com/gpu-group-size": size}}
        tasks.append({"name": f"t{t}", "replicas": rng.randint(1, 3), "template": template})
    if rng.random() < 0.2:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"},
                "spec": {"replicas": tasks[0]["replicas"], "template": tasks[0]["template"]}}
    job: Obj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "g", "namespace": rng.choice("xy"),
                             "labels": {"maip.mxsf.io/usage": "training"}},
                "spec": {"schedulerName": "volcano", "tasks": tasks,
                         "minAvailable": rng.randint(1, sum(t["replicas"] for t in tasks))}}
    queue = rng.choice([None, None, "q1", "q2", "root", "missing"])
    if queue:
        job["spec"]["queue"] = queue
    return job


def _evaluation_lines(result: Any) -> list[str]:
    return [*(f"{f.rule} {f.severity} {f.path} {f.message}" for f in result.findings),
            json.dumps(result.patch, sort_keys=True)]


POLICIES = [{}, {"feasibility": {"autoscaling": True}}, {"gpu": {"supernodeLabels": [CLIQUE, "rack"]}}]


def scenario_verdicts(seeds: range = range(120)) -> Iterator[list[str]]:
    policies = [policy_from_data(p) for p in POLICIES]
    for seed in seeds:
        rng = random.Random(seed)
        names = [f"n{i}" for i in range(rng.randint(1, 6))]
        objects = [*(_node(rng, n) for n in names), *(_pod(rng, names) for _ in range(rng.randint(0, 3))),
                   _queue("root", None), _queue("q1", {"cpu": "6"}, parent="root")]
        topo = Topology.from_objects(objects)
        clusters = [ClusterSnapshot("c", topo)]
        shapes = [_job(rng) for _ in range(rng.randint(1, 3))]
        stored: dict[int, Obj] = {}
        for step in range(rng.randint(6, 16)):
            action = rng.randint(0, 5)
            if action == 0:
                topo.apply(*_event(rng, names))
                continue
            index = rng.randrange(len(shapes))
            doc = copy.deepcopy(shapes[index])
            doc["metadata"]["name"] = f"job-{index}"
            policy = rng.choice(policies)
            previous = stored.get(index)
            if previous is not None and action == 1:
                doc = copy.deepcopy(previous)   # an UPDATE: scale a task, or a label only
                if rng.random() < 0.5 and doc["kind"] == "Job":
                    doc["spec"]["tasks"][0]["replicas"] += 1
                else:
                    doc["metadata"].setdefault("labels", {})["touched"] = str(step)
            result = evaluate(doc, policy, clusters, previous=previous if action == 1 else None)
            stored[index] = result.mutated or doc
            yield [f"seed {seed} step {step}", *_evaluation_lines(result)]


def verdicts() -> list[list[str]]:
    return [*rule_example_verdicts(), *manifest_verdicts(), *scenario_verdicts()]


def _verdicts_in_a_process(memo_setting: str) -> tuple[list[list[str]], list[list[Any]]]:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_memo_switch as t; "
            "from policies import memo; found = t.verdicts(); "
            "print(json.dumps({'verdicts': found, 'kept': memo.inventory()}))")
    env = {**os.environ, "GPUGATE_MEMO": memo_setting}
    done = subprocess.run([sys.executable, "-c", code, str(HERE)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["verdicts"], out["kept"]


def _first_difference(a: list[list[str]], b: list[list[str]]) -> str:
    for left, right in zip(a, b, strict=False):
        if left != right:
            return f"\nwith memo: {left}\nwithout:   {right}"
    return f"\n{len(a)} verdicts against {len(b)}"


def test_verdicts_are_the_same_with_memo_on_and_off() -> None:
    assert memo.enabled(), "the suite runs with memoisation on (GPUGATE_MEMO unset)"
    cold = verdicts()
    warm = verdicts()   # the same process again: every store warm
    assert len(cold) > 300, "too few verdicts compared for this test to mean anything"
    assert any(len(v) > 2 for v in cold), "no input had a finding"
    assert warm == cold, _first_difference(warm, cold)
    off, kept_off = _verdicts_in_a_process("off")
    assert off == cold, _first_difference(cold, off)
    assert all(size == 0 for _, size in kept_off), f"memo off, yet kept: {kept_off}"
    # and the switch is real: the same run with memo on keeps things
    on, kept_on = _verdicts_in_a_process("on")
    assert on == cold
    assert sum(size for _, size in kept_on) > 0


def test_memo_off_keeps_nothing_in_any_store() -> None:
    with memo.disabled():
        policy = Policy()
        topo = Topology.from_objects([_node(random.Random(1), "n0")], policy)
        list(scenario_verdicts(range(3)))
        evaluate(_job(random.Random(2)), policy, [ClusterSnapshot("c", topo)])
        assert len(policy.memo) == 0
        assert all(size == 0 for _, size in memo.inventory())
        assert len(topo.memo) == 0 and topo.outcome_memo is None or len(topo.outcome_memo) == 0
    assert memo.enabled()


# The modules whose assertions are verdicts: they must hold with memo off too.
VERDICT_MODULES = ["test_rule_examples.py", "test_lifecycle.py", "test_feasibility.py", "test_messages.py",
                   "test_usage_mutation.py", "test_example_workloads.py", "test_quiet_valid.py",
                   "test_rules_edge.py", "test_feasibility_property.py", "test_yunikorn.py"]


def test_verdict_modules_pass_with_memo_off() -> None:
    if os.environ.get("GPUGATE_MEMO", "on") == "off":
        pytest.skip("already running with memo off")
    env = {**os.environ, "GPUGATE_MEMO": "off", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           *(str(HERE / m) for m in VERDICT_MODULES)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:]
