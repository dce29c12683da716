"""A GPU workload pins the GPU product it wants.

GPU nodes are tainted with their product (`nvidia.com/gpu.product=NVIDIA-H20:NoSchedule`,
seed 003): a pod that names no product tolerates none of them and waits forever, or,
where a node is untainted, lands on whatever card is free (a small model on the big
cards). Each GPU pod template should pin a product with a `nodeSelector` or a required
node affinity on the product label of its resource (`gpu.resources`), or the workload
carries that label (`nvidia.com/gpu.product: NVIDIA-H20`) and GG102 adds the toleration.

Clouds and schedulers name the model with other labels, which pin it just as well: a
`nodeSelector` or required node affinity `In` on any node label of `gpu.modelPins.nodeLabels`
(`cloud.google.com/gke-accelerator`, `node.kubernetes.io/instance-type`,
`karpenter.k8s.aws/instance-gpu-name`, ...), or an annotation of `gpu.modelPins.annotations`
on the pod template (HAMi's `nvidia.com/use-gputype: A100`). The lists are in the policy
file, to extend.

```yaml pass
apiVersion: v1
kind: Pod
metadata: {name: h20}
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H20}
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```

```yaml fail
apiVersion: v1
kind: Pod
metadata: {name: any-gpu}
spec:
  containers:
  - name: main
    image: nginx
    resources: {limits: {nvidia.com/gpu: 1}}
```
"""

from collections.abc import Iterable, Iterator

from policies.config import Policy
from policies.context import Context, Sees
from policies.findings import Problem, Severity, SpecProblem, quoted
from policies.gpu import GPU_RESOURCES, gpu_facts_blind, gpu_pod_sets, gpu_requests, gpus_per_pod
from policies.options import Option
from policies.quantity import format_quantity, is_positive
from policies.spec_problems import pod_set_problems
from policies.usage import (
    annotation_pins_model,
    labels_pin_product,
    pinned_products,
    spec_pinned_products,
    spec_pins_model,
)
from policies.workload import PodSet, Workload

ID = "GG104"
SLUG = "gpu-product-declared"
SEVERITY = Severity.WARNING
SEES = Sees(pod_sets=True)

_STR_LIST = {"type": "array", "items": {"type": "string"}}
MODEL_PIN_LABELS = Option(
    "gpu.modelPins.nodeLabels", _STR_LIST,
    ["nvidia.com/gpu.product", "cloud.google.com/gke-accelerator",
     "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
     "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-family",
     "karpenter.azure.com/sku-gpu-name", "k8s.amazonaws.com/accelerator",
     "gpu.nvidia.com/class", "gpu.nvidia.com/model", "amd.com/gpu.product-name", "accelerator"],
    "Node labels that pin a GPU model besides the product labels of `gpu.resources`: a "
    "`nodeSelector` or required node affinity `In` on one of them.")
MODEL_PIN_ANNOTATIONS = Option("gpu.modelPins.annotations", _STR_LIST, ["nvidia.com/use-gputype"],
                               "Pod template annotations that pin a GPU model.")
OPTIONS = (MODEL_PIN_LABELS, MODEL_PIN_ANNOTATIONS, GPU_RESOURCES)


def check(workload: Workload, ctx: Context) -> Iterable[Problem]:
    if labels_pin_product(workload, ctx.policy):
        return _pinned_by_labels(workload, ctx.policy)
    # Nearly always: pinned by the pod spec or not at all, a fact of the spec's content.
    # GPU requests, pins and model pins: no cpu or memory amount, unless the policy names one a GPU
    problems = pod_set_problems(workload, ctx.policy, (ID, ctx.token), _in_spec,
                                blind=gpu_facts_blind(ctx.policy))
    if problems:  # rare: an annotation of the template (not of its spec) may pin the model
        pinned = [p.spec_path for p in workload.pod_sets if annotation_pins_model(p, ctx.policy)]
        if pinned:
            problems = [p for p in problems if p.path not in pinned]
    return problems


def _in_spec(pod_set: PodSet, policy: Policy) -> list[SpecProblem]:
    if not is_positive(gpus_per_pod(pod_set, policy)) or spec_pinned_products(pod_set, policy) \
            or spec_pins_model(pod_set, policy):
        return []
    return [SpecProblem(f" {_unpinned(pod_set, policy)}", "")]


def _pinned_by_labels(workload: Workload, policy: Policy) -> Iterator[Problem]:
    for pod_set in gpu_pod_sets(workload, policy):
        if not pinned_products(pod_set, workload, policy) and not spec_pins_model(pod_set, policy) \
                and not annotation_pins_model(pod_set, policy):
            yield Problem(f"pod set {quoted(pod_set.name)} {_unpinned(pod_set, policy)}",
                          pod_set.spec_path)


def _unpinned(pod_set: PodSet, policy: Policy) -> str:
    """What the message says of a GPU pod set that pins no product."""
    requested = gpu_requests(pod_set, policy)
    wanted = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in requested.items())
    labels = " or ".join(dict.fromkeys(policy.gpu_resources[r] for r in requested))
    return (f"requests {wanted} per pod but pins no GPU product: set nodeSelector {labels} "
            "(or the workload label)")
