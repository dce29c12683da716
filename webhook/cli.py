"""``gpugate serve`` and ``gpugate snapshot``."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.metrics import Metrics

log = logging.getLogger("gpugate.webhook")


def build_serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpugate serve", description="Run the admission webhook (HTTPS).")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8443, help="port to listen on (default: 8443)")
    parser.add_argument("--tls-cert", required=True, metavar="FILE",
                        help="serving certificate (PEM), reloaded when it changes")
    parser.add_argument("--tls-key", required=True, metavar="FILE", help="its private key (PEM)")
    parser.add_argument("--config", metavar="FILE", help="policy file, reloaded when it changes")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig for the live topology (default: the in-cluster service account)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--crd-retry-seconds", type=float, default=60.0, metavar="S",
                        help="how often the live topology looks again for an optional kind whose CRD is "
                             "not installed (Volcano, Kueue, KAI, Trainer, ...; default: 60)")
    parser.add_argument("--cluster", action="append", default=[], metavar="FILE",
                        help="static cluster snapshot instead of the live watch, reloaded when it changes; "
                             "repeat for a fleet")
    parser.add_argument("--audit-interval", type=float, default=0.0, metavar="SECONDS",
                        help="every SECONDS, audit the cluster's pending workloads against the live topology "
                             "(in a forked child, never holding a review): a Warning Event (reason "
                             "GpugateNeverFits) on each one that will never run, and the gpugate_audit_* "
                             "metrics; needs RBAC to list the workload kinds and to write Events "
                             "(deploy/components/audit). Needs the live topology (it lists workloads from "
                             "the API server): refused with --cluster. 0: off (default); 300 is a sensible "
                             "value")
    parser.add_argument("--log-format", choices=["json", "text"], default="text")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    parser.add_argument("--metrics-port", type=int, default=9090,
                        help="plain-HTTP port serving GET /metrics only (default: 9090; 0: a free port)")
    parser.add_argument("--metrics-host", metavar="HOST",
                        help="address for the metrics port (default: --host)")
    parser.add_argument("--max-connections", type=int, default=1024, metavar="N",
                        help="open connections on the webhook port; beyond it new ones are reset at once "
                             "(default: 1024)")
    parser.add_argument("--drain-seconds", type=float, default=5.0, metavar="S",
                        help="after SIGTERM, keep serving reviews this long with /readyz 503 before the "
                             "listener closes (default: 5)")
    parser.add_argument("--shutdown-seconds", type=float, default=10.0, metavar="S",
                        help="then, how long reviews in flight get to finish (default: 10)")
    parser.add_argument("--overload-answer", choices=["allow", "deny"], default="allow",
                        help="what /validate answers for a review shed under overload: allow (with the "
                             "warning 'gpugate: overloaded, not checked', default) or deny (code 429; for "
                             "fail-closed installations)")
    return parser


def reload_counter(metrics: Metrics, what: str) -> Callable[[bool], None]:
    """An ``on_reload`` callback: count a reload of ``what`` (config, certificate, cluster)
    as ok or rejected in ``gpugate_reloads_total``."""
    return lambda ok: metrics.reloads.labels(what, "ok" if ok else "rejected").inc()


def _fail(message: str) -> int:
    print(f"gpugate: {message}", file=sys.stderr)
    return 2


def serve_main(argv: Sequence[str]) -> int:
    args = build_serve_parser().parse_args(argv)
    import asyncio

    from policies.config import PolicyError
    from webhook.app import BackgroundTask, TopologySource, Webhook
    from webhook.lifecycle import Serving
    from webhook.logs import configure_logging
    from webhook.metrics import Metrics
    from webhook.reload import PolicySource
    from webhook.static import StaticTopology, settle_heap
    from webhook.tls import ReloadingContext, TLSConfigError

    configure_logging(args.log_format, getattr(logging, args.log_level.upper()))
    if not 0 <= args.audit_interval < float("inf"):
        return _fail(f"--audit-interval must be 0 (off) or a number of seconds, not {args.audit_interval:g}")
    if args.audit_interval and args.cluster:
        return _fail("--audit-interval needs the live topology: it lists the cluster's workloads from the "
                     "API server, which a --cluster snapshot file does not give; drop --cluster (use "
                     "--kubeconfig, or run in the cluster) or drop --audit-interval")
    holder: dict[str, TopologySource] = {}
    metrics = Metrics(lambda: holder["topology"].clusters() if "topology" in holder else None)

    try:
        policy = PolicySource(args.config, on_reload=reload_counter(metrics, "config"),
                              on_missing=metrics.reloads.labels("config", "missing").inc)
        tls = ReloadingContext(args.tls_cert, args.tls_key, on_reload=reload_counter(metrics, "certificate"))
    except (PolicyError, TLSConfigError) as exc:
        return _fail(str(exc))

    topology: TopologySource
    background: list[BackgroundTask] = []
    if args.cluster:
        from policies.snapshots import SnapshotError

        try:
            # re-read when a file changes (policy at that time); a bad new version is rejected
            topology = StaticTopology.from_files(args.cluster, lambda: policy.policy,
                                                 on_reload=reload_counter(metrics, "cluster"))
        except SnapshotError as exc:
            return _fail(str(exc))
        settle_heap()
    else:
        from kubernetes.config.config_exception import ConfigException

        from webhook.kube import WatchOptions
        from webhook.watch import LiveTopology, api_client_for

        try:
            api_client, name = api_client_for(args.kubeconfig, args.context)
        except (ConfigException, OSError) as exc:
            return _fail(f"no Kubernetes API to watch ({exc}); give --kubeconfig, run in a cluster, "
                         "or use --cluster FILE for a static topology")
        topology = LiveTopology(api_client, policy.policy, name=name, metrics=metrics,
                                policy_source=lambda: policy.policy,
                                options=WatchOptions(crd_retry_seconds=max(args.crd_retry_seconds, 1.0)))
        if args.audit_interval:
            from webhook.periodic_audit import PeriodicAudit

            background.append(PeriodicAudit(topology, lambda: policy.policy, metrics, args.audit_interval))
    holder["topology"] = topology
    # The feasibility check is imported on its first use (the linter without a cluster never
    # loads it): here before serving, so that the first review's budget is not spent importing it.
    importlib.import_module("policies.feasibility")

    webhook = Webhook(policy=policy, topology=topology, metrics=metrics, tls=tls,
                      overload_answer=args.overload_answer, background=background)
    serving = Serving(webhook, args.host, args.port, tls.context, metrics_host=args.metrics_host,
                      metrics_port=args.metrics_port, max_connections=args.max_connections,
                      shutdown_seconds=args.shutdown_seconds)
    log.info("gpugate webhook starting (%s topology)", "static" if args.cluster else "live")
    try:
        asyncio.run(serving.run_until_signalled(args.drain_seconds))
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port} (metrics: {args.metrics_port}): "
                     f"{exc.strerror or exc}")
    return 0


def build_snapshot_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpugate snapshot",
        description="Export the cluster topology (nodes, pods, Volcano queues, pod groups, hypernodes, "
                    "elastic quota trees) as a List for 'gpugate lint --cluster FILE' and "
                    "'gpugate serve --cluster FILE'. Nodes and pods are required; the other kinds are "
                    "CRDs that a cluster may not have: those it does not serve are left out and named "
                    "on stderr.")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig (default: $KUBECONFIG or ~/.kube/config, as kubectl; else the "
                             "in-cluster service account)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="where to write (default: stdout); .json writes JSON, anything else YAML")
    parser.add_argument("--workloads", action="store_true",
                        help="also the workload kinds (Jobs, JobSets, RayClusters, Volcano Jobs, Kueue "
                             "Workloads, ...) that the API server serves: what 'gpugate audit --cluster "
                             "FILE' judges")
    return parser


def snapshot_main(argv: Sequence[str]) -> int:
    args = build_snapshot_parser().parse_args(argv)
    import urllib3.exceptions
    import yaml
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from webhook.kube import RESOURCES, WatchOptions, workload_resources
    from webhook.watch import ExportFailed, api_client_for, default_kubeconfig, export_topology

    logging.basicConfig(level=logging.WARNING, format="gpugate: %(message)s")
    try:
        api_client, _ = api_client_for(args.kubeconfig or default_kubeconfig(), args.context)
    except (ConfigException, OSError) as exc:
        return _fail(f"cannot configure the Kubernetes client: {exc}")
    try:
        resources = RESOURCES + workload_resources(api_client) if args.workloads else RESOURCES
        export = export_topology(api_client, resources, options=WatchOptions(min_backoff=0))
    except ExportFailed as exc:
        return _fail(str(exc))
    except ApiException as exc:
        return _fail(f"API server answered {exc.status} {(exc.reason or '').strip()}")
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        return _fail(f"cannot reach the API server: {exc}")
    objects = export.objects
    for kind, why in export.absent.items():
        print(f"gpugate: no {kind} in the snapshot: {why}", file=sys.stderr)
    document = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": objects}
    if args.output.endswith(".json"):
        text = json.dumps(document, indent=1)
    else:
        text = yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    try:
        if args.output == "-":
            sys.stdout.write(text)
        else:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as exc:
        return _fail(f"cannot write {args.output}: {exc.strerror or exc}")
    # every kind that was listed, 0 included: served but empty is not the same as absent
    summary = ", ".join(f"{n} {k}" for k, n in export.counts.items()) or "no objects"
    print(f"gpugate: wrote {summary} to {args.output}", file=sys.stderr)
    return 0
