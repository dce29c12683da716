"""Resources the API server refuses in a pod spec.

The API server validates every pod's resources (`ValidatePodSpec` in Kubernetes' core
validation): a request above its limit (`cpu: 2` requested, `1` the limit), a negative
amount, an extended resource (`example.com/fpga`) whose request differs from its limit,
that is requested without a limit, or that is not a whole number, a resource name that
is not a standard one (`cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>`) nor a
qualified extended one, huge pages that are not a multiple of their page size. For the
pod-level resources (`spec.resources`, on by default since Kubernetes 1.34): only `cpu`,
`memory` and huge pages may be set (huge pages with a `cpu` or `memory` amount), no
`claims`, a pod-level request may not be below what the containers request together, and
no container may set a limit above the pod-level one. For a job kind the object is
accepted and its pods are refused, when the controller creates them. GPU resources
(`gpu.resources`) are GG501-GG503's and are not reported twice; unparsable quantities
are GG504's. A container's huge pages without a `cpu` or `memory` amount are left to the
API server: a namespace's LimitRange, which gpugate cannot see, may give the container
defaults first. So is a pod-level huge-pages request without a pod-level limit (the API
server may default that limit).

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  resources:
    requests: {cpu: "4", memory: 16Gi}
    limits: {cpu: "8", memory: 16Gi}
  containers:
  - name: main
    image: pytorch/pytorch
    resources:
      requests: {cpu: "2", memory: 8Gi, example.com/fpga: 1}
      limits: {cpu: "4", example.com/fpga: 1}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  containers:
  - name: main
    image: pytorch/pytorch
    resources:
      requests: {cpu: "4"}
      limits: {cpu: "2"}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  resources:
    requests: {cpu: "1", nvidia.com/gpu: 1}
  containers:
  - name: main
    image: pytorch/pytorch
    resources:
      requests: {cpu: "2"}
```
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from fractions import Fraction
from typing import Any

from policies.config import Policy
from policies.context import Context, Sees
from policies.findings import (
    SHORT_QUOTED_CHARS,
    Problem,
    Severity,
    SpecProblem,
    join_pointer,
    quoted,
)
from policies.gpu import GPU_RESOURCES
from policies.names import is_extended_resource, is_native_resource, qualified_name_problem
from policies.quantity import QuantityError, parse_quantity
from policies.resources import HUGEPAGES_PREFIX, is_pod_level_resource, pod_requests
from policies.spec_problems import pod_set_problems
from policies.workload import PodSet, Workload, spec_containers

ID = "GG505"
SLUG = "resource-invalid"
SEVERITY = Severity.ERROR
SEES = Sees(pod_sets=True)
OPTIONS = (GPU_RESOURCES,)

_WHY = "the API server refuses it"
_Q = SHORT_QUOTED_CHARS
# Names without a "/" that a container may use (IsStandardContainerResourceName upstream).
_CONTAINER_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage"})


def check(workload: Workload, ctx: Context) -> list[Problem]:
    # reads CPU and memory amounts (request against limit): full facts, not blind ones
    return pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec)


def _in_spec(pod_set: PodSet, policy: Policy) -> Iterator[SpecProblem]:
    spec = pod_set.spec
    gpus = policy.gpu_resources
    containers, inits = spec_containers(spec)
    for path, container in containers:
        resources = container.get("resources")
        if isinstance(resources, dict):
            name = container.get("name")
            who = f" container {quoted(name if isinstance(name, str) else '?', SHORT_QUOTED_CHARS)}"
            yield from _container(resources, path + "/resources", who, gpus)
    pod_level = spec.get("resources")
    if isinstance(pod_level, dict) and pod_level:
        regular = [c for _, c in containers[inits:]]
        yield from _pod_level(spec, pod_level, regular)


# -- names --------------------------------------------------------------------------------------

def _container_name_problem(name: str) -> str:
    """Why a container may not use resource ``name``, or ""."""
    problem = qualified_name_problem(name)
    if problem:
        return problem
    if "/" not in name:
        if name not in _CONTAINER_STANDARD and not name.startswith(HUGEPAGES_PREFIX):
            return "is not a container resource (cpu, memory, ephemeral-storage, hugepages-*)"
    elif not is_native_resource(name) and not is_extended_resource(name):
        return "does not follow the extended resource name standard"
    return ""


def _pod_level_name_problem(name: str) -> str:
    """Why ``spec.resources`` may not name ``name``, or ""."""
    problem = qualified_name_problem(name)
    if problem:
        return problem
    if not is_pod_level_resource(name):
        return "is not supported at pod level (only cpu, memory, hugepages-*)"
    return ""


# -- amounts ------------------------------------------------------------------------------------

def _amounts(values: Any) -> dict[str, tuple[Any, Fraction]]:
    """``{name: (raw, amount)}`` of a requests or limits mapping: names that are strings,
    values set and parsable (null is unset; GG504 reports the unparsable)."""
    found: dict[str, tuple[Any, Fraction]] = {}
    if not isinstance(values, dict):
        return found
    for name, raw in values.items():
        if type(name) is not str or raw is None:
            continue
        try:
            found[name] = (raw, parse_quantity(raw))
        except QuantityError:
            continue
    return found


def _hugepages_problem(name: str, amount: Fraction) -> str:
    """Why ``amount`` of huge pages ``name`` is refused (not a multiple of the page size), or ""."""
    try:
        page = parse_quantity(name[len(HUGEPAGES_PREFIX):])
    except QuantityError:
        return ""  # a page size we cannot read: left to the API server
    if page.numerator <= 0 or page.denominator != 1:
        return ""
    whole = -(-amount.numerator // amount.denominator)  # the API server rounds up to bytes
    if whole % page.numerator:
        return f"is not a whole multiple of the {quoted(name[len(HUGEPAGES_PREFIX):], _Q)} page size"
    return ""


def _amount_problems(part: str, values: dict[str, tuple[Any, Fraction]], base: str, who: str,
                     pod_level: bool) -> Iterator[SpecProblem]:
    for name, (raw, amount) in values.items():
        problem = ("is negative" if amount.numerator < 0
                   else "is not a whole number (extended resources are counted in units)"
                   if not pod_level and amount.denominator != 1 and is_extended_resource(name)
                   else _hugepages_problem(name, amount) if name.startswith(HUGEPAGES_PREFIX)
                   else "")
        if problem:
            yield SpecProblem(f"{who}: {quoted(name, _Q)} {part[:-1]} {quoted(raw, _Q)} {problem}; {_WHY}",
                              join_pointer(base, part, name))


def _request_limit_problems(requests: dict[str, tuple[Any, Fraction]],
                            limits: dict[str, tuple[Any, Fraction]], raw_limits: Any, base: str,
                            who: str, pod_level: bool) -> Iterator[SpecProblem]:
    for name, (raw, amount) in requests.items():
        if amount.numerator < 0:
            continue  # reported as negative
        strict = is_extended_resource(name) or name.startswith(HUGEPAGES_PREFIX)  # never overcommitted
        limit = limits.get(name)
        path = join_pointer(base, "requests", name)
        res, value = quoted(name, _Q), quoted(raw, _Q)
        if limit is None:
            set_at_all = isinstance(raw_limits, dict) and name in raw_limits
            if strict and not pod_level and not set_at_all:
                yield SpecProblem(f"{who}: {res} request {value} has no limit; {_WHY} (it cannot be "
                                  "overcommitted: a limit is required)", path)
            continue
        raw_limit, limit_amount = limit
        if limit_amount.numerator < 0:
            continue
        if strict and amount != limit_amount:
            yield SpecProblem(f"{who}: {res} request {value} differs from limit {quoted(raw_limit, _Q)}; "
                              f"{_WHY} (it cannot be overcommitted: they must be equal)", path)
        elif amount > limit_amount:
            yield SpecProblem(f"{who}: {res} request {value} is above limit {quoted(raw_limit, _Q)}; {_WHY}",
                              path)


# -- containers ---------------------------------------------------------------------------------

def _container(resources: dict[str, Any], base: str, who: str,
               gpus: Mapping[str, str]) -> Iterator[SpecProblem]:
    # the GPU resources are GG501-GG503's
    parts = yield from _valid_parts(resources, base, who, _container_name_problem, gpus, pod_level=False)
    yield from _request_limit_problems(parts["requests"], parts["limits"], resources.get("limits"), base, who,
                                       pod_level=False)


def _valid_parts(resources: dict[str, Any], base: str, who: str, name_problem: Callable[[str], str],
                 skip: Mapping[str, Any],
                 pod_level: bool) -> Generator[SpecProblem, None, dict[str, dict[str, tuple[Any, Fraction]]]]:
    """The problems of the names and amounts of a ``resources`` block (container or pod level)
    but ``skip``'s; returns the valid amounts of each part, for comparing requests with limits."""
    parts: dict[str, dict[str, tuple[Any, Fraction]]] = {}
    for part in ("limits", "requests"):
        valid: dict[str, tuple[Any, Fraction]] = {}
        for name, entry in _amounts(resources.get(part)).items():
            if name in skip:
                continue
            problem = name_problem(name)
            if problem:
                yield SpecProblem(f"{who}: resource name {quoted(name, _Q)} {problem}; {_WHY}",
                                  join_pointer(base, part, name))
                continue
            valid[name] = entry
        yield from _amount_problems(part, valid, base, who, pod_level=pod_level)
        parts[part] = valid
    return parts


# -- pod level ----------------------------------------------------------------------------------

def _pod_level(spec: dict[str, Any], resources: dict[str, Any],
               regular: list[dict[str, Any]]) -> Iterator[SpecProblem]:
    base = "/resources"
    who = " spec.resources"
    claims = resources.get("claims")
    if isinstance(claims, list) and claims:
        yield SpecProblem(f"{who}: {len(claims)} claims set; claims cannot be set at pod level, {_WHY}",
                          base + "/claims")
    parts = yield from _valid_parts(resources, base, who, _pod_level_name_problem, {}, pod_level=True)
    requests, limits = parts["requests"], parts["limits"]
    yield from _request_limit_problems(requests, limits, resources.get("limits"), base, who, pod_level=True)
    hugepages = [name for name in (*requests, *limits) if name.startswith(HUGEPAGES_PREFIX)]
    if hugepages and not _pod_level_cpu_or_memory(resources, limits, spec):
        first = hugepages[0]
        yield SpecProblem(f"{who}: {quoted(first, _Q)} set without a pod-level cpu or memory amount; huge "
                          f"pages need one, {_WHY}",
                          join_pointer(base, "limits" if first in limits else "requests", first))
    if requests:
        # what the containers request together (limits as requests, sidecars, init peaks)
        only_containers: dict[str, Any] = {k: spec[k] for k in ("initContainers", "containers") if k in spec}
        aggregate, _errors = pod_requests(only_containers, "")
        for name, (raw, amount) in requests.items():
            needed = aggregate.get(name)
            if needed is not None and amount.numerator >= 0 and amount < needed:
                yield SpecProblem(f"{who}: {quoted(name, _Q)} request {quoted(raw, _Q)} is below the "
                                  f"{_plain(needed)} the containers request together; {_WHY}",
                                  join_pointer(base, "requests", name))
    if limits:
        for container in regular:
            container_resources = container.get("resources")
            if not isinstance(container_resources, dict):
                continue
            for name, (raw, amount) in _amounts(container_resources.get("limits")).items():
                pod_limit = limits.get(name)
                if pod_limit is not None and pod_limit[1].numerator >= 0 and amount > pod_limit[1]:
                    cname = container.get("name")
                    cname = quoted(cname if isinstance(cname, str) else "?", SHORT_QUOTED_CHARS)
                    yield SpecProblem(f"{who}: {quoted(name, _Q)} limit {quoted(pod_limit[0], _Q)} is below "
                                      f"container {cname}'s limit {quoted(raw, _Q)}; {_WHY}",
                                      join_pointer(base, "limits", name))


def _pod_level_cpu_or_memory(resources: dict[str, Any], limits: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether the pod-level resources have (or, once defaulted, will have) a cpu or memory
    amount. The API server defaults pod-level requests only when pod-level limits are set,
    from the limits and from the containers' requests: any container cpu or memory then
    counts (and anything unreadable counts too: where unsure, no finding)."""
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict) and ("cpu" in values or "memory" in values):
            return True
    if not limits and not resources.get("limits"):
        return False
    containers, _ = spec_containers(spec)
    for _, container in containers:
        container_resources = container.get("resources")
        if not isinstance(container_resources, dict):
            continue
        for part in ("requests", "limits"):
            values = container_resources.get(part)
            if values is None:
                continue
            if not isinstance(values, dict) or "cpu" in values or "memory" in values:
                return True
    return False


def _plain(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):.6g}"
