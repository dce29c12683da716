"""Gang feasibility: can the workload's gang ever run on the cluster, and can it run now?

Layers, each importing only the ones above it in this list:

- :mod:`.outcomes`: verdicts, typed causes and outcomes (what the check answers);
- :mod:`.specs`: what eligibility reads of a pod spec, and its signature;
- :mod:`.questions`: :func:`fit_question` reduces a workload to a hashable
  :class:`FitQuestion`, the only thing the check reads of it;
- :mod:`.nodes`: eligibility masks (taints, selectors, affinity, nodeName, the
  ExtendedResourceToleration plugin);
- :mod:`.capacity`: pods per node, on the allocatable and on the free resources now;
- :mod:`.packing`: greedy placement (witnesses) and necessary conditions (proofs);
- :mod:`.supernodes`: GPU groups inside supernodes;
- :mod:`.queues`: Volcano queues and ElasticQuotaTree quotas;
- :mod:`.check`: one member cluster (:func:`check_cluster`, :class:`OutcomeMemo`);
- :mod:`.fleet`: every member cluster of a context, combined (:func:`evaluate`).

Soundness is the point: a ``never`` blocks someone's job, so every ``never`` comes from a
condition that any placement must satisfy, and every ``fits`` from a real placement.
Everything is array operations over nodes; what does not depend on a job's requests is
kept on the topology against the versions it was computed from, so a warm answer is the
answer a cold check gives. Which rule reports which cause, and at which severity, is
decided in :mod:`policies.rules._feasibility`.
"""

from __future__ import annotations

from .check import MEMO_ENTRIES, OutcomeMemo, check_cluster
from .fleet import Answer, evaluate
from .nodes import eligible_mask, runs_extended_toleration
from .outcomes import Cause, ExplainRow, Outcome, Report, Verdict, fmt
from .questions import Demand, FitQuestion, GroupQuestion, demands_for, fit_question
from .specs import extended_resources, extended_toleration_mode, implied_tolerations

__all__ = ["Verdict", "Cause", "ExplainRow", "Outcome", "Report", "Answer", "Demand", "GroupQuestion",
           "FitQuestion", "OutcomeMemo", "MEMO_ENTRIES", "check_cluster", "evaluate", "fit_question",
           "demands_for", "eligible_mask", "runs_extended_toleration", "extended_resources",
           "extended_toleration_mode", "implied_tolerations", "fmt"]
