"""``gpugate audit``'s engine: why is each pending job pending, and will it ever run?

:mod:`~policies.audit.subjects` finds the top of each ownership tree and whether it waits;
:mod:`~policies.audit.judge` judges each with the engine (pending ones against the cluster's
topology); :mod:`~policies.audit.policyreports` turns the result into wgpolicyk8s.io
PolicyReports. No I/O: the front ends list the cluster, write reports and emit Events.
"""

from .judge import VERDICTS, Audit, Entry, Filters, GangVerdict, audit
from .subjects import Subject, find_subjects

__all__ = ["VERDICTS", "Audit", "Entry", "Filters", "GangVerdict", "Subject", "audit", "find_subjects"]
