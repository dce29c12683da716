"""Where an audit's objects come from: the live cluster (listed once, through the same code as
the webhook's watch) or a snapshot file (``gpugate snapshot --workloads``)."""

from __future__ import annotations

import datetime
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from policies.config import Policy
from policies.kinds import kind_spec
from policies.snapshots import SnapshotError, member_names, snapshot_objects
from policies.topology import ClusterSnapshot, Topology
from policies.workload import is_kubernetes_object

__all__ = ["Source", "SourceError", "from_snapshot", "from_cluster"]

_T = TypeVar("_T")


class SourceError(Exception):
    """The objects cannot be read (the command exits with 2)."""


@dataclass
class Source:
    """The objects of one cluster, its topology, and what could not be read."""

    objects: list[dict[str, Any]]
    snapshot: ClusterSnapshot
    origin: str                         # the file, or the kubeconfig context
    read_at: str                        # when the objects were listed (RFC 3339), "" for a file
    absent: dict[str, str] = field(default_factory=dict)    # kind -> why it is missing
    api_client: Any = None              # the live cluster's client (reports are written with it)

    @property
    def has_workloads(self) -> bool:
        """Whether it holds objects that own pods (Jobs, JobSets, ...), not pods alone."""
        return any(o.get("kind") != "Pod" and is_kubernetes_object(o)
                   and (spec := kind_spec(o["apiVersion"], o["kind"])) is not None and spec.pod_sets
                   for o in self.objects)


def _kept(load: Callable[[], _T]) -> _T:
    """``load()`` with the cyclic garbage collector off, and what it made moved out of the
    collector's sight (``gc.freeze``): a cluster's objects are millions of young dicts that
    form no cycles and live to the end of the run, and the collections they would trigger
    scan them all again and again (JSON of 100,000 pods parses about 3x slower with them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return load()
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_snapshot(path: str, policy: Policy) -> Source:
    """The objects of a snapshot file (what ``gpugate snapshot`` writes, or any List)."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read cluster snapshot {path}: {exc.strerror or exc}") from None
    try:
        objects = _kept(lambda: snapshot_objects(text, path))
    except SnapshotError as exc:
        raise SourceError(str(exc)) from None
    if not objects:
        raise SourceError(f"{path}: no Kubernetes objects in the cluster snapshot")
    name = member_names([path])[0]
    topology = _kept(lambda: Topology.from_objects(objects, policy))
    return Source(objects, ClusterSnapshot(name, topology), path, "")


def from_cluster(kubeconfig: str | None, context: str | None, policy: Policy) -> Source:
    """Every object of the topology's kinds and of the workload kinds the API server serves,
    listed once."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from webhook.kube import RESOURCES, WatchOptions, workload_resources
    from webhook.watch import ExportFailed, api_client_for, default_kubeconfig, export_topology

    try:
        api_client, name = api_client_for(kubeconfig or default_kubeconfig(), context)
    except (ConfigException, OSError) as exc:
        raise SourceError(f"cannot configure the Kubernetes client: {exc}; give --kubeconfig, run in a "
                          "cluster, or audit a snapshot with --cluster FILE") from None
    try:
        read_at = _now()
        resources = RESOURCES + workload_resources(api_client)
        export = _kept(lambda: export_topology(api_client, resources, options=WatchOptions(min_backoff=0)))
    except ExportFailed as exc:
        raise SourceError(str(exc)) from None
    except ApiException as exc:
        raise SourceError(f"API server answered {exc.status} {(exc.reason or '').strip()}") from None
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        raise SourceError(f"cannot reach the API server: {exc}") from None
    snapshot = ClusterSnapshot(name, _kept(lambda: Topology.from_objects(export.objects, policy)))
    return Source(export.objects, snapshot, name, read_at, dict(export.absent), api_client)
