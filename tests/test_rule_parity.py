"""Rule evaluation gives one answer per document, however warm the caches are.

The rules share derived facts through memos (on the policy, the workload, its pod sets)
and module-level caches (parsed quantities). A memo keyed wrongly, or a cache that leaks
state from one document into the next, would change a verdict depending on what was
evaluated before: the property tests here evaluate documents fresh and after other
documents have warmed every cache, and demand identical findings and patches.

Script mode records and compares the full evaluation of every corpus document, every
example manifest, every rule example and deterministic mutations of them, under several
policies. It is the self-check used while optimising the rules (a recorded baseline is
not committed: it would pin today's messages, not correctness)::

    .venv/bin/python tests/test_rule_parity.py --record /tmp/rule_parity_baseline.json
    .venv/bin/python tests/test_rule_parity.py --compare /tmp/rule_parity_baseline.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lint.cli import iter_files  # noqa: E402
from lint.documents import Document, iter_documents  # noqa: E402
from lint.policyfile import load_policy  # noqa: E402
from policies.config import Policy, policy_from_data  # noqa: E402
from policies.engine import Evaluation, evaluate  # noqa: E402
from policies.findings import join_pointer, split_pointer  # noqa: E402
from policies.gpu import gpu_pod_sets, gpu_requests, gpus_per_pod, is_gpu_workload, raw_gpu_resources  # noqa: E402
from policies.groups import group_annotations, group_sizes, is_multiple  # noqa: E402
from policies.quantity import exact_sum, is_positive  # noqa: E402
from policies.registry import all_rules  # noqa: E402
from policies.tolerations import any_tolerates, exact_tolerations  # noqa: E402
from policies.usage import (  # noqa: E402
    _add_tolerations,
    _Builder,
    _carries_usage,
    _inject_usage,
    _spec_pins_tolerated,
    _spec_walk,
    _tolerates_all,
    _tolerates_pinned,
    _wanted_usage,
    in_scope,
    labels_pin_product,
    pinned_products,
    product_toleration,
    steered_pod_sets,
    usage_config,
    usage_conflicts,
    usage_patch,
    workload_usage,
)
from policies.workload import ShapeError, Workload, build_workload, is_kubernetes_object  # noqa: E402

EXAMPLES = ROOT / "examples"
CORPUS = ROOT.parent / "shared" / "corpus"

# Values that reach the rules' odd corners: malformed quantities, group sizes, operators.
ODD_VALUES: list[Any] = [
    None, True, 0, 1, 8, 7, -1, 2**70, 1.5, 0.1, "", "0", "1", "8", "64", "-1", "1.5", "500m", "2Gi",
    "1e3", "2 GB", "0x10", "volcano", "default-scheduler", "training", "inference", "hybrid", "Exists",
    "In", "NotIn", "DoesNotExist", "Equal", "NoSchedule", "A100", "Master", "q/../x", "a~b/c",
    [], {}, ["training"], ["inference", "hybrid"], {"key": "maip.mxsf.io/node.usage", "operator": "Exists"},
]

ODD_KEYS: list[Any] = [1, 0, "0", "1", "a/b", "x~y", "~1", "Worker", "Master", "spec", "template",
                       "nvidia.com/gpu", "metax-tech.com/gpu-group-size", "maip.mxsf.io/usage", None]


def policies() -> dict[str, Policy]:
    """The policies every document is evaluated under."""
    custom = sorted((EXAMPLES / "policies").glob("*/policy.yaml"))
    found = {
        "default": Policy(),
        "scope-all": policy_from_data({"usage": {"scope": "all"}}, "scope-all"),
        "other-keys": policy_from_data({
            "usage": {"nodeKey": "example.com/pool", "workloadKey": "example.com/purpose",
                      "pools": {"training": ["training"], "batch": ["batch", "training"]},
                      "preferredWeight": 7, "defaults": {"Job": "batch"}},
            "gpu": {"resources": {"metax-tech.com/gpu": "metax-tech.com/gpu.product",
                                  "amd.com/gpu": "amd.com/gpu.product"},
                    "groupSizeAnnotation": "example.com/group",
                    "atomicGroupSizeAnnotation": "example.com/atomic"},
            "queues": {"require": True},
            "rules": {"GG105": {"severity": "error"}, "GG301": "off", "gpu-whole-number": "warning"},
        }, "other-keys"),
    }
    for path in custom:
        found[f"custom:{path.parent.name}"] = load_policy(path)
    return found


def _file_documents(path: str) -> Iterator[Any]:
    try:
        text = Path(path).read_bytes()
    except OSError:
        return
    for item in iter_documents(text):
        if isinstance(item, Document) and item.data is not None:
            yield item.data


def _rule_example_documents() -> Iterator[tuple[str, Any]]:
    for rule in all_rules().values():
        for i, example in enumerate(rule.examples):
            if example.role not in ("pass", "fail"):
                continue
            try:
                loaded = list(yaml.safe_load_all(example.text))
            except yaml.YAMLError:
                continue
            for j, doc in enumerate(loaded):
                if doc is not None:
                    yield f"rule:{rule.id}:{example.role}{i}:{j}", doc


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def mutated(doc: Any, rng: random.Random, edits: int) -> Any:
    """``doc`` with ``edits`` subtrees replaced by odd values or removed (deterministic per ``rng``)."""
    doc = copy.deepcopy(doc)
    for _ in range(edits):
        paths = [p for p in _paths(doc) if p and p[0] not in ("apiVersion", "kind")]
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for token in path[:-1]:
            parent = parent[token]
        roll = rng.random()
        if isinstance(parent, dict) and roll < 0.25:
            del parent[path[-1]]
        elif isinstance(parent, dict) and roll < 0.4:  # keys JSON Pointers must escape, or not strings
            parent[rng.choice(ODD_KEYS)] = parent.pop(path[-1])
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    return doc


def bench_documents() -> list[tuple[str, Any]]:
    """The webhook bench's job, as submitted and as the mutating webhook returns it."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from webhook_bench import pytorch_job, submitted  # type: ignore[import-not-found]
    except ImportError:  # the bench is not part of an installed package
        return []
    return [("bench:pytorch_job(64)", pytorch_job(64)), ("bench:submitted", submitted(pytorch_job(64)))]


def documents(mutations: int = 1500) -> list[tuple[str, Any]]:
    """(name, document) for everything the parity run evaluates, in a stable order."""
    found: list[tuple[str, Any]] = []
    for directory, label in ((CORPUS, "corpus"), (EXAMPLES, "examples")):
        if not directory.is_dir():
            continue
        for path in iter_files([str(directory)]):
            for i, doc in enumerate(_file_documents(path)):
                found.append((f"{label}:{Path(path).relative_to(directory)}:{i}", doc))
    found.extend(_rule_example_documents())
    found.extend(bench_documents())
    found.extend(_other_gpu_resource(found))
    seeds = [(name, doc) for name, doc in found if not name.startswith("corpus:")]
    seeds += [(name, doc) for name, doc in found if name.startswith("corpus:") and _has_pods(doc)][:200]
    rng = random.Random(20240611)
    for n in range(mutations):
        name, doc = seeds[n % len(seeds)]
        found.append((f"mutated{n}:{name}", mutated(doc, rng, rng.randint(1, 3))))
    return found


def _other_gpu_resource(found: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The example workloads asking for ``amd.com/gpu``, which only one of the policies knows."""
    variants = []
    for name, doc in found:
        text = json.dumps(doc)
        if not name.startswith("corpus:") and '"nvidia.com/gpu"' in text:
            variants.append((f"amd:{name}", json.loads(text.replace('"nvidia.com/gpu"', '"amd.com/gpu"'))))
    return variants


def _has_pods(doc: Any) -> bool:
    return "containers" in json.dumps(doc, default=str)


def outcome(result: Evaluation) -> dict[str, Any]:
    """Everything a front end reports for one evaluation, as JSON-ready data."""
    return {
        "skipped": result.skipped,
        "excluded": result.excluded,
        "findings": [{"rule": f.rule, "slug": f.slug, "severity": str(f.severity), "message": f.message,
                      "path": f.path, "fixable": f.fixable,
                      "object": f.object.as_dict() if f.object else None} for f in result.findings],
        "patch": json.loads(json.dumps(result.patch, default=repr)),
    }


def full_outcome(doc: Any, policy: Policy) -> dict[str, Any]:
    """The evaluation of ``doc`` and, when it was mutated, of its mutated form (a second admission)."""
    first = evaluate(doc, policy)
    out = {"first": outcome(first)}
    if first.mutated is not None:
        out["again"] = outcome(evaluate(first.mutated, policy))
    return out


def record(mutations: int = 1500) -> dict[str, Any]:
    table = policies()
    return {f"{policy_name} | {name}": full_outcome(doc, policy)
            for name, doc in documents(mutations) for policy_name, policy in table.items()}


def compare(baseline: dict[str, Any], current: dict[str, Any], show: int = 10) -> int:
    differences = sorted(k for k in baseline.keys() | current.keys() if baseline.get(k) != current.get(k))
    for key in differences[:show]:
        print(f"DIFFERENT: {key}\n  before: {json.dumps(baseline.get(key))[:1500]}\n"
              f"  after:  {json.dumps(current.get(key))[:1500]}")
    print(f"{len(current)} evaluations, {len(differences)} differences")
    return len(differences)


# -- the committed tests: one answer per document, cold or warm --------------------------------

_SAMPLES: list[tuple[str, Any]] = [(n, d) for n, d in documents(mutations=300)
                                   if not n.startswith("corpus:") or _has_pods(d)]
_POLICIES = policies()
PARITY = settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _isolated(doc: Any, policy: Policy) -> dict[str, Any]:
    """The evaluation with no state shared with earlier ones: a fresh copy of the document
    and of the policy (its memo is per object), caches of parsed values and of pod spec
    facts cleared."""
    from policies.pointers import _remembered_tokens
    from policies.quantity import parse_text
    from policies.specfacts import SPEC_FACTS

    parse_text.cache_clear()
    _remembered_tokens.cache_clear()
    SPEC_FACTS.clear()
    fresh_policy = policy_from_data(copy.deepcopy(_raw_policy(policy)), policy.source)
    return full_outcome(copy.deepcopy(doc), fresh_policy)


def _raw_policy(policy: Policy) -> dict[str, Any]:
    return {k: v for k, v in policy.data.items() if k not in ("apiVersion", "kind")}


@PARITY
@given(st.sampled_from(_SAMPLES), st.sampled_from(sorted(_POLICIES)),
       st.lists(st.sampled_from(_SAMPLES), min_size=1, max_size=4))
def test_warm_evaluation_equals_isolated_one(sample: tuple[str, Any], policy_name: str,
                                             before: list[tuple[str, Any]]) -> None:
    """Documents evaluated earlier (same policy object, warm caches) change nothing."""
    name, doc = sample
    policy = _POLICIES[policy_name]
    expected = _isolated(doc, policy)
    for _, other in before:
        full_outcome(other, policy)
    assert full_outcome(doc, policy) == expected, name
    assert full_outcome(doc, policy) == expected, f"{name} (evaluated twice)"


@PARITY
@given(st.sampled_from(_SAMPLES), st.sampled_from(sorted(_POLICIES)))
def test_evaluation_leaves_the_document_untouched(sample: tuple[str, Any], policy_name: str) -> None:
    """Rules read the submitted object; the patch goes to a copy."""
    name, doc = sample
    snapshot = copy.deepcopy(doc)
    full_outcome(doc, _POLICIES[policy_name])
    assert doc == snapshot, name


def derived_facts(workload: Workload, policy: Policy) -> dict[str, Any]:
    """What the rules derive from a workload under a policy, through the shared (remembered)
    helpers, as plain data."""
    annotations = group_annotations(workload, policy)
    facts: dict[str, Any] = {
        "is_gpu": is_gpu_workload(workload, policy),
        "gpu_pod_sets": [p.name for p in gpu_pod_sets(workload, policy)],
        "in_scope": in_scope(workload, policy),
        "usage": workload_usage(workload, policy),
        "group_annotations": [(v.key, v.raw, v.value, v.path, v.where)
                              for v in (*annotations.size, *annotations.atomic)],
    }
    spec = group_sizes(workload, policy)
    facts["group_sizes"] = None if spec is None else (
        spec.size, spec.atomic, spec.size_path, spec.atomic_path, spec.total_gpus,
        [(p.pod_set.name, p.gpus) for p in spec.pod_sets])
    usage = facts["usage"][0]
    for pod_set in workload.pod_sets:
        facts[f"pod set {pod_set.path}"] = (
            gpus_per_pod(pod_set, policy), gpu_requests(pod_set, policy), raw_gpu_resources(pod_set, policy),
            pinned_products(pod_set, workload, policy), pinned_products(pod_set, workload, policy, False),
            usage_conflicts(pod_set, usage, policy) if usage is not None else None)
    return facts


@PARITY
@given(st.sampled_from(_SAMPLES), st.permutations(sorted(_POLICIES)))
def test_one_workload_asked_under_several_policies(sample: tuple[str, Any], order: list[str]) -> None:
    """Facts remembered on a workload belong to the policy they were derived under: the
    same workload asked under several policies in turn answers as a fresh one would."""
    name, doc = sample
    try:
        shared = build_workload(doc) if is_kubernetes_object(doc) else None
    except ShapeError:
        return
    if shared is None:
        return
    for policy_name in order:
        policy = _POLICIES[policy_name]
        fresh = build_workload(copy.deepcopy(doc))
        assert fresh is not None
        assert derived_facts(shared, policy) == derived_facts(fresh, policy), (name, policy_name)


# -- the shortcuts the rules take are exact -----------------------------------------------------

FRACTIONS = st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=1000)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRACTIONS, st.integers(-(10**20), 10**20).map(Fraction)), max_size=6))
def test_exact_sum_is_the_fraction_sum(amounts: list[Fraction]) -> None:
    total = exact_sum(amounts)
    assert total == sum(amounts, Fraction(0)) and type(total) is Fraction
    assert all(is_positive(a) == (a > 0) for a in amounts)


@settings(max_examples=300, deadline=None)
@given(st.one_of(FRACTIONS, st.integers(-(10**6), 10**6)), st.one_of(FRACTIONS, st.integers(-64, 64)))
def test_is_multiple_is_the_fraction_remainder(amount: Fraction | int, of: Fraction | int) -> None:
    if of == 0:
        return
    assert is_multiple(amount, of) == (Fraction(amount) % of == 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab~/0 .", max_size=6), max_size=5))
def test_pointers_round_trip(tokens: list[str]) -> None:
    pointer = join_pointer("", *tokens)
    assert split_pointer(pointer) == tokens
    assert split_pointer(pointer) == tokens  # the remembered split as well


# -- shortcuts must answer as the long way would ------------------------------------------

_TOLERATION_KEYS = st.sampled_from(["", "a", "b", 0, None])
_TOLERATION: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries({}, optional={
        "key": _TOLERATION_KEYS,
        "operator": st.sampled_from(["Equal", "Exists", "", "In", None]),
        "value": st.sampled_from(["", "x", "y", 0, 1, None, True]),
        "effect": st.sampled_from(["", "NoSchedule", "NoExecute", None, 0]),
    }),
    st.sampled_from([None, "a", 3, []]))


@settings(max_examples=400, deadline=None)
@given(st.lists(_TOLERATION, max_size=5), st.sampled_from(["a", "b"]), st.sampled_from(["", "x", "y", "0"]),
       st.sampled_from(["NoSchedule", "NoExecute"]))
def test_toleration_index_never_claims_more_than_any_tolerates(tolerations: list[Any], key: str, value: str,
                                                              effect: str) -> None:
    """A hit in the index of ``Equal`` tolerations is a toleration that tolerates the taint."""
    index = exact_tolerations(tolerations)
    if (key, value, effect) in index or (key, value, "") in index:
        assert any_tolerates(tolerations, key, value, effect)


def _without_last(doc: Any, key: str) -> Any:
    """A copy of ``doc`` with the last item of every non-empty list under ``key`` removed."""
    if isinstance(doc, dict):
        return {k: (v[:-1] if k == key and isinstance(v, list) and v else _without_last(v, key))
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [_without_last(v, key) for v in doc]
    return doc


def _carried_samples() -> list[tuple[str, Any]]:
    """Every sample as submitted, as the mutating webhook leaves it (which carries all), and
    that with one toleration, required term expression or preferred term short."""
    found = list(_SAMPLES)
    policy = _POLICIES["default"]
    for name, doc in _SAMPLES:
        result = evaluate(copy.deepcopy(doc), policy)
        if result.mutated is not None:
            found.append((f"{name} (mutated)", result.mutated))
            for key in ("tolerations", "matchExpressions", "preferredDuringSchedulingIgnoredDuringExecution"):
                found.append((f"{name} (mutated, a {key} short)", _without_last(result.mutated, key)))
    return found


_CARRIED = _carried_samples()


def test_nothing_to_add_shortcut_agrees_with_the_builder() -> None:
    """Where GG101/GG102 conclude "nothing to add" without building a patch, building one
    for every pod set finds nothing either; and the patches are those the builder makes."""
    for sample in _CARRIED:
        for policy in _POLICIES.values():
            _check_shortcut(sample, policy)


def _check_shortcut(sample: tuple[str, Any], policy: Policy) -> None:
    name, doc = sample
    try:
        workload = build_workload(copy.deepcopy(doc)) if is_kubernetes_object(doc) else None
    except ShapeError:
        return
    if workload is None or not in_scope(workload, policy):
        return
    usage, _ = workload_usage(workload, policy)
    builder = _Builder(workload)
    if usage is not None:
        wanted = _wanted_usage(usage_config(policy), usage)
        for pod_set in workload.pod_sets:
            spec = _spec_walk(pod_set, workload.doc)[1]
            if _carries_usage(pod_set, spec, wanted):
                assert not _inject_usage(_Builder(workload), _Builder(workload).enter(pod_set), wanted), name
        long_ops = _long_usage_ops(workload, wanted, policy)
        assert [p.ops for p in usage_patch(workload, policy)] == long_ops, name
    pinned = [(pod_set, pinned_products(pod_set, workload, policy,
                                        include_workload_label=is_positive(gpus_per_pod(pod_set, policy))))
              for pod_set in workload.pod_sets]
    if not labels_pin_product(workload, policy):  # where GG102 takes its shortcut
        assert not _spec_pins_tolerated(workload, policy) or _tolerates_pinned(pinned, workload), name
    for pod_set, pairs in pinned:
        wanted_tolerations = [product_toleration(label, product) for label, product in pairs]
        if pairs and _tolerates_all(pod_set, _spec_walk(pod_set, workload.doc)[1], wanted_tolerations):
            injected: list[str] = []
            _add_tolerations(builder, builder.enter(pod_set), wanted_tolerations, injected)
            assert not injected, name


def _long_usage_ops(workload: Workload, wanted: Any, policy: Policy) -> list[list[Any]]:
    """The ops of :func:`usage_patch` built for every steered pod set, without the shortcut."""
    builder = _Builder(workload)
    out: list[list[Any]] = []
    for pod_set in steered_pod_sets(workload, policy):
        start = len(builder.ops)
        if _inject_usage(builder, builder.enter(pod_set), wanted):
            out.append(copy.deepcopy(builder.ops[start:]))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="FILE", help="write the evaluation of every document to FILE")
    mode.add_argument("--compare", metavar="FILE",
                      help="compare against a recording; exit 1 on any difference")
    parser.add_argument("--mutations", type=int, default=1500, metavar="N",
                        help="mutated example documents to add (default: 1500)")
    args = parser.parse_args(argv)
    current = record(args.mutations)
    if args.record:
        Path(args.record).write_text(json.dumps(current, sort_keys=True))
        print(f"recorded {len(current)} evaluations to {args.record}")
        return 0
    return 1 if compare(json.loads(Path(args.compare).read_text()), current) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
