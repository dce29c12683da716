"""``gpugate audit``: the cluster-audit front end (live cluster or snapshot in; a table, JSON,
SARIF and PolicyReports out). It stands on both other front ends: the webhook's list code
reads the cluster, the linter's formats and progress bar write the answer; the judging is
:mod:`policies.audit`'s."""
