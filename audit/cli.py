"""``gpugate audit``: why is each pending job pending, and will it ever run?"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from audit.formats import FAIL_ON, FORMATS
from audit.sources import Source, SourceError, from_cluster, from_snapshot
from lint.policyfile import find_policy_file, load_policy
from lint.progress import Progress
from policies.audit import Filters, audit
from policies.audit.policyreports import build_reports
from policies.config import Policy, PolicyError

__all__ = ["build_parser", "audit_main"]

DEFAULT_BUDGET_MS = 2000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpugate audit",
        description="Judge every pending gang, pod group, job and Kueue workload of a cluster: never "
                    "(it can never run, and why), waits (for what), unknown (what gpugate cannot see) or "
                    "fits; and scan the existing objects with the lint rules (what was created before "
                    "gpugate was installed). Reads the live cluster, or a snapshot file.")
    source = parser.add_argument_group("cluster")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig (default: $KUBECONFIG or ~/.kube/config, else the in-cluster "
                             "service account)")
    source.add_argument("--context", help="kubeconfig context (default: the current one)")
    source.add_argument("--cluster", metavar="SNAPSHOT",
                        help="audit a snapshot file instead of the live cluster "
                             "('gpugate snapshot --workloads -o FILE' writes one)")
    source.add_argument("--policy", metavar="FILE",
                        help="policy file (default: .gpugate.yaml here or in a parent directory)")
    chosen = parser.add_argument_group("what to audit")
    chosen.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                        help="only this namespace (repeatable)")
    chosen.add_argument("--queue", action="append", default=[], metavar="NAME",
                        help="only objects that name this queue: Volcano, Kueue LocalQueue or KAI "
                             "(repeatable)")
    chosen.add_argument("--kind", action="append", default=[], metavar="KIND",
                        help="only this kind: Job, Job.batch or jobs (repeatable)")
    chosen.add_argument("--pending-only", action="store_true",
                        help="judge the pending objects alone, no lint scan of the others")
    chosen.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS, metavar="MS",
                        help=f"feasibility budget per pending object; past it the verdict is unknown "
                             f"(default {DEFAULT_BUDGET_MS})")
    output = parser.add_argument_group("output")
    output.add_argument("-f", "--format", choices=sorted(FORMATS), default="table",
                        help="table (people, worst first), json or sarif (default: table)")
    output.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="where to write (default: stdout)")
    output.add_argument("--fail-on", choices=list(FAIL_ON), default="never",
                        help="exit 1 when a pending object has this verdict or a worse one "
                             "(never < unknown < waits; default: never; none: always 0)")
    output.add_argument("--write-reports", action="store_true",
                        help="also write the results as wgpolicyk8s.io/v1alpha2 PolicyReports (one per "
                             "namespace) and a ClusterPolicyReport, named gpugate, updated in place; "
                             "gpugate's reports of namespaces without results are deleted")
    output.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    return parser


def _fail(message: str) -> int:
    print(f"gpugate audit: {message}", file=sys.stderr)
    return 2


def _policy(path: str | None) -> Policy:
    found = path or find_policy_file()
    return load_policy(found) if found else Policy()


def audit_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="gpugate: %(message)s")
    if args.write_reports and args.cluster:
        return _fail("--write-reports writes to the live cluster: it cannot be used with --cluster FILE")
    if args.write_reports and (args.queue or args.kind):
        return _fail("--write-reports rewrites whole namespaces' reports: use --namespace, "
                     "not --queue or --kind")
    if args.budget_ms <= 0:
        return _fail("--budget-ms must be positive")
    try:
        policy = _policy(args.policy)
    except PolicyError as exc:
        return _fail(str(exc))
    try:
        source: Source = from_snapshot(args.cluster, policy) if args.cluster \
            else from_cluster(args.kubeconfig, args.context, policy)
    except SourceError as exc:
        return _fail(str(exc))
    filters = Filters(frozenset(args.namespace), frozenset(args.queue), frozenset(args.kind))
    bar: Progress | None = None

    def start(total: int) -> None:
        nonlocal bar
        bar = Progress(total, enabled=None if not args.no_progress else False, unit="objects")

    def advance(label: str) -> None:
        if bar is not None:
            bar.advance(label)

    try:
        result = audit(source.objects, source.snapshot, policy, filters=filters, scan=not args.pending_only,
                       budget_seconds=args.budget_ms / 1000, progress=advance, on_subjects=start)
    finally:
        if bar is not None:
            bar.close()
    text = FORMATS[args.format](result, source)
    try:
        if args.output == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
    except OSError as exc:
        return _fail(f"cannot write {args.output}: {exc.strerror or exc}")
    if args.write_reports:
        from audit.reports import ReportsError, write_reports

        try:
            written = write_reports(source.api_client, build_reports(result, int(time.time())),
                                    frozenset(args.namespace) or None)
        except ReportsError as exc:
            return _fail(str(exc))
        print(f"gpugate audit: PolicyReports: {written.summary()}", file=sys.stderr)
        for _, why in written.failed:
            print(f"gpugate audit: {why}", file=sys.stderr)
        if written.failed:
            return 2
    failing = FAIL_ON[args.fail_on]
    return 1 if any(e.gang is not None and e.gang.verdict in failing for e in result.entries) else 0
