"""Which scheduler a workload's pods end up with, as far as the manifest can tell.

For most kinds that is the pod template's ``schedulerName`` (or the kind's default).
Operators can decide it themselves, outside the manifest:

- KubeRay started with ``--batch-scheduler=volcano`` sets ``schedulerName`` on every
  pod, ignoring the template and (from KubeRay 1.3) the legacy ``ray.io/scheduler-name``
  label. For kinds with a ``scheduler_override`` in the kind table only that label, when
  present, tells us anything.
- training-operator with gang scheduling fills an *empty* ``schedulerName`` with its
  gang scheduler (``operator_scheduler`` in the kind table).

Where the manifest does not decide, the scheduler is unknown and rules must not guess.

Any ``schedulerName`` but the default one is a batch scheduler to the gang rules: Volcano,
KAI (``kai-scheduler``: one PodGroup per top owner, from its podgrouper), YuniKorn
(``yunikorn``). Their queues are read off the objects and pods by
:data:`policies.kinds.COMMON_QUEUES` (KAI's ``kai.scheduler/queue`` label; YuniKorn's
``queue`` label and ``yunikorn.apache.org/queue`` annotation).
"""

from __future__ import annotations

from policies.kinds import VOLCANO_SCHEDULER
from policies.workload import MISSING, PodSet, Workload, resolve

__all__ = ["scheduler_known", "pod_set_scheduler", "non_volcano_pod_sets", "scheduler_path",
           "VOLCANO_SCHEDULER"]


def scheduler_known(workload: Workload) -> bool:
    """False when an operator flag outside the manifest may choose the scheduler for
    the whole workload (a Ray kind without the ``ray.io/scheduler-name`` label)."""
    override = workload.spec.scheduler_override
    if override is None:
        return True
    value = resolve(workload.doc, override)
    return value is not MISSING and value not in (None, "")


def pod_set_scheduler(workload: Workload, pod_set: PodSet, *, trust_operator: bool = True) -> str | None:
    """The scheduler of the pod set's pods, or None when an operator flag may decide it.

    ``trust_operator=False`` treats an empty template ``schedulerName`` as the kind's
    default even where an operator may fill it (GG204: the seed requires it explicit).
    """
    if workload.spec.scheduler_override is not None:
        return pod_set.scheduler if scheduler_known(workload) else None
    if trust_operator and workload.spec.operator_scheduler and not pod_set.spec.get("schedulerName"):
        return None
    return pod_set.scheduler


def non_volcano_pod_sets(workload: Workload, *, trust_operator: bool = True) -> list[PodSet]:
    """Gang pod sets whose pods are known not to be scheduled by Volcano."""
    found = []
    for pod_set in workload.gang_pod_sets:
        if pod_set.scheduler == VOLCANO_SCHEDULER:
            continue  # pod_set_scheduler gives this or None: Volcano either way (the usual case)
        scheduler = pod_set_scheduler(workload, pod_set, trust_operator=trust_operator)
        if scheduler is not None and scheduler != VOLCANO_SCHEDULER:
            found.append(pod_set)
    return found


def scheduler_path(workload: Workload, pod_set: PodSet) -> str:
    """Where to fix a pod set's scheduler: the override label, else the template field."""
    if workload.spec.scheduler_override is not None:
        return workload.spec.scheduler_override
    if "schedulerName" not in pod_set.spec and workload.spec.scheduler is not None:
        return workload.spec.scheduler  # the object-level field the template inherits
    return pod_set.spec_path + "/schedulerName"
