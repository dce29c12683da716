"""``gpugate audit`` on the real control plane: the command run as a process against the
session's cluster, its verdicts held against what the real kube-scheduler did, and the
PolicyReports it writes read back with the kubernetes client.

The workloads are made in a namespace gpugate is not called in (``ignored_namespace``), as if
they were created before gpugate was installed: gpugate would refuse the ones that never fit.
No Volcano or Kueue controller runs: the test makes the Volcano PodGroup and the Kueue Workload
their controllers would make, with the conditions they would set.

- never / waits / fits: a Job asking more GPUs per pod than any node has (never, and the
  scheduler agrees: its pod stays Unschedulable), one behind a node full of another Job's
  bound pod (waits), one with room now that the scheduler holds for a missing PVC, which
  gpugate does not model (fits); a Volcano Job above its queue's capability and a suspended
  Job above its Kueue ClusterQueue's quota (never). The table leads with the nevers; the exit
  code follows ``--fail-on``; a snapshot (``gpugate snapshot --workloads``) gives the same
  verdicts as the live cluster.
- ``--write-reports``: the namespace's PolicyReport is created, left alone when nothing
  changed, updated in place when a result goes, and deleted when none is left; another
  namespace's report is never touched by a run scoped to one namespace.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from policies.audit import VERDICTS

from .conftest import POLICY, Session
from .kube import REPO, Gpugate, resource_path, wait_until
from .objects import (
    KUEUE_API,
    batch_job,
    kueue_queues,
    kueue_workload,
    owned_by,
    queue,
    selector,
    tolerations,
    usage_affinity,
    volcano_job,
    volcano_podgroup,
)
from .steps import bound_pods

pytestmark = pytest.mark.e2e

# Which of a test's nodes a Job may use, beside the test's own group label.
ROLE_KEY = "e2e.gpugate.io/role"
REPORTS = ("wgpolicyk8s.io", "v1alpha2", "policyreports")
# What the controllers that do not run here would say (Volcano's enqueue, Kueue's flavor assigner).
VOLCANO_SAYS = "queue resource quota insufficient"
# Something the scheduler checks and gpugate does not model: the pod waits, though it fits.
MISSING_PVC = [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
KUEUE_SAYS = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
              "{flavor}, request > maximum capacity (8 > 4)")


@pytest.fixture
def made(e2e: Session) -> Iterator[list[str]]:
    """API paths of the cluster-scoped objects a test makes (nodes, queues): deleted after it,
    last first, so that no later test sees them."""
    paths: list[str] = []
    yield paths
    for path in reversed(paths):
        with contextlib.suppress(Exception):
            e2e.api.request("DELETE", path)


# -- helpers --------------------------------------------------------------------------------

def _gpugate(e2e: Session, *args: str) -> subprocess.Popen[str]:
    """``gpugate ARGS`` against the session's cluster, started."""
    command = [sys.executable, "-m", "gpugate", *args, "--kubeconfig", str(e2e.cluster.kubeconfig)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def _audit(e2e: Session, *args: str) -> subprocess.Popen[str]:
    """``gpugate audit ARGS`` with the session's policy, started."""
    return _gpugate(e2e, "audit", "--policy", str(e2e.gate.policy_path), *args)


def _node(e2e: Session, made: list[str], name: str, group: str, role: str) -> None:
    e2e.cluster.gpu_node(name, group, gpus=8, extra_labels={ROLE_KEY: role})
    made.append(f"/api/v1/nodes/{name}")


def _job(ns: str, name: str, gpus: int, role: str | None = None, **extra: Any) -> dict[str, Any]:
    """A Job on the test's nodes (of ``role`` only, if given) tolerating their taints."""
    chosen = {**selector(ns), **({ROLE_KEY: role} if role else {})}
    return batch_job(ns, name, ns, gpus, tolerations=tolerations(), nodeSelector=chosen, **extra)


def _create(e2e: Session, obj: dict[str, Any], plural: str) -> dict[str, Any]:
    namespace = obj["metadata"].get("namespace")
    created = e2e.api.request("POST", resource_path(obj["apiVersion"], plural, namespace), obj)
    assert created.status == 201, (obj["kind"], obj["metadata"]["name"], created)
    return dict(created.body)


def _scheduler_said(e2e: Session, ns: str, count: int) -> dict[str, dict[str, Any]]:
    """Wait until the scheduler has tried ``count`` unbound pods of the namespace (their
    ``PodScheduled`` condition is set); their conditions by the name of their Job."""
    def tried() -> dict[str, dict[str, Any]]:
        said = {p["metadata"]["labels"]["job-name"]: c for p in e2e.api.list("v1", "Pod", ns)
                if not p["spec"].get("nodeName")
                for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"}
        return said if len(said) >= count else {}
    said = wait_until(tried, 30, 0.2)
    assert said, f"the scheduler has not tried {count} pods in {ns}"
    return said


def _verdicts(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """What an audit said of each pending object, by name."""
    return {e["object"]["name"]: (e["object"]["kind"], e["verdict"], e["cause"], e["rule"], e["reason"],
                                  e["heldBy"], e["systemSays"], e["podSets"], e["queues"])
            for e in report["pending"]}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _delete_jobs(e2e: Session, ns: str, *names: str) -> None:
    """Delete Jobs and their pods at once (a bound pod would hang in Terminating: no kubelet)."""
    for name in names:
        deleted = e2e.api.request("DELETE", resource_path("batch/v1", "jobs", ns, name),
                                  query=[("propagationPolicy", "Background")])
        assert deleted.ok, deleted
        gone = e2e.api.request("DELETE", resource_path("v1", "pods", ns), query=[
            ("labelSelector", f"job-name={name}"), ("gracePeriodSeconds", "0")])
        assert gone.ok, gone

    def cleared() -> bool:
        pods = {p["metadata"]["labels"].get("job-name") for p in e2e.api.list("v1", "Pod", ns)}
        jobs = {j["metadata"]["name"] for j in e2e.api.list("batch/v1", "Job", ns)}
        return not (pods | jobs) & set(names)
    assert wait_until(cleared, 30, 0.2), f"jobs {names} or their pods still in {ns}"


# -- never, waits, fits ---------------------------------------------------------------------

def test_audit_verdicts_agree_with_the_scheduler(crds: Session, ignored_namespace: str, made: list[str],
                                                 tmp_path: Path) -> None:
    """never, waits and fits as gpugate sees them, and as the scheduler (and the Volcano and
    Kueue conditions) say; the table worst first; the exit code per --fail-on; a snapshot
    audited offline says the same as the live cluster."""
    e2e, ns = crds, ignored_namespace
    _node(e2e, made, f"{ns}-full", ns, "full")
    _node(e2e, made, f"{ns}-spare", ns, "spare")
    assert e2e.api.create(_job(ns, "filler", 8, "full")).status == 201
    bound_pods(e2e, ns, 1)            # the full node is full before anything waits for it
    for job in (_job(ns, "never", 16), _job(ns, "waits", 8, "full"),
                _job(ns, "fits", 1, "spare", volumes=MISSING_PVC)):
        assert e2e.api.create(job).status == 201, job["metadata"]["name"]

    # A Volcano Job of 2 x 4 GPUs in a queue of 4, and the PodGroup Volcano's controller makes
    # for it (the CRD has no status subresource: its status is written with it).
    queue_name = f"aq-{ns}"[:60]
    volcano_queue = queue(queue_name, gpus=4)
    assert e2e.api.create(volcano_queue).status == 201
    made.append(resource_path(volcano_queue["apiVersion"], "queues", None, queue_name))
    assert e2e.api.patch(volcano_queue, {"status": {"state": "Open"}}, subresource="status").ok
    vcjob = volcano_job(ns, "vcjob", ns, queue_name, gpus=4, replicas=2)
    for task in vcjob["spec"]["tasks"]:
        task["template"]["spec"]["tolerations"] = tolerations()
    vcjob = _create(e2e, vcjob, "jobs")
    group = owned_by(volcano_podgroup(ns, f"vcjob-{vcjob['metadata']['uid']}", queue_name, min_gpus=8), vcjob)
    group["status"] = {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": VOLCANO_SAYS,
         "lastTransitionTime": _now()}]}
    _create(e2e, group, "podgroups")

    # A Job of 8 GPUs suspended under a LocalQueue whose ClusterQueue grants 4, and the
    # Workload Kueue's job controller makes for it, not admitted.
    flavor = f"aq-{ns}"[:60]
    for obj, plural in kueue_queues(ns, flavor, "team", gpus=4):
        _create(e2e, obj, plural)
        if plural != "localqueues":
            made.append(resource_path(KUEUE_API, plural, None, flavor))
    queued = _job(ns, "queued", 8, "spare")
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    queued["spec"]["suspend"] = True
    queued = _create(e2e, queued, "jobs")
    workload = _create(e2e, kueue_workload(queued, "team"), "workloads")
    kueue_says = KUEUE_SAYS.format(flavor=flavor)
    status = e2e.api.request("PATCH", resource_path(KUEUE_API, "workloads", ns, workload["metadata"]["name"],
                                                    "status"),
                             {"status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                                         "reason": "Pending", "message": kueue_says,
                                                         "lastTransitionTime": _now()}]}},
                             content_type="application/merge-patch+json")
    assert status.ok, status

    _scheduler_said(e2e, ns, 3)
    snapshot = tmp_path / "snapshot.yaml"
    # three processes at once: they only read, and the cluster holds still
    runs = [_audit(e2e, "-f", "json", "-n", ns), _audit(e2e, "-f", "table", "-n", ns, "--fail-on", "none"),
            _gpugate(e2e, "snapshot", "--workloads", "-o", str(snapshot))]
    (code, out, err), (table_code, table, table_err), (snap_code, _, snap_err) = map(_finish, runs)

    # the scheduler's own answers (the pods are still unbound): it places neither never nor
    # waits for want of GPUs, and holds fits for the PVC
    said = _scheduler_said(e2e, ns, 3)
    for name in ("never", "waits", "fits"):
        assert said[name]["status"] == "False" and said[name]["reason"] == "Unschedulable", said
    assert "Insufficient nvidia.com/gpu" in said["never"]["message"], said["never"]
    assert "Insufficient nvidia.com/gpu" in said["waits"]["message"], said["waits"]
    assert 'persistentvolumeclaim "missing" not found' in said["fits"]["message"], said["fits"]

    assert code == 1, f"a never at the default --fail-on exits 1: {code}\n{err}"
    report = json.loads(out)
    assert report["verdicts"] == {"never": 3, "unknown": 0, "waits": 1, "fits": 1}, report["verdicts"]
    verdicts = {name: v[:4] for name, v in _verdicts(report).items()}
    assert verdicts == {
        "never": ("Job", "never", "nodes-never-hold", "GG403"),
        "vcjob": ("Job", "never", "queue-never-holds", "GG402"),
        "queued": ("Job", "never", "queue-never-holds", "GG402"),
        "waits": ("Job", "waits", "waits-for-room", "GG404"),
        "fits": ("Job", "fits", "fits", ""),
    }, verdicts
    pending = {e["object"]["name"]: e for e in report["pending"]}
    assert [e["verdict"] for e in report["pending"]] == sorted(
        (e["verdict"] for e in report["pending"]), key=VERDICTS.index), "pending not worst first"
    # what holds each, and what the cluster's own components say of it, word for word
    assert {n: e["heldBy"] for n, e in pending.items()} == {
        "never": ["1 pod not scheduled"], "waits": ["1 pod not scheduled"], "fits": ["1 pod not scheduled"],
        "vcjob": ["pod group Pending"], "queued": ["not admitted by Kueue"]}
    for name in ("never", "waits", "fits"):
        assert pending[name]["systemSays"] == [f"scheduler: {said[name]['message']}"], pending[name]
    assert pending["vcjob"]["systemSays"] == [f"volcano: {VOLCANO_SAYS}"]
    assert pending["queued"]["systemSays"] == [f"kueue: {kueue_says}"]
    assert pending["vcjob"]["queues"] == [queue_name]
    assert pending["queued"]["queues"] == ["team"]
    assert pending["vcjob"]["kind"] == "Job.batch.volcano.sh" and pending["never"]["kind"] == "Job.batch"
    assert "16" in pending["never"]["reason"] and "8" in pending["never"]["reason"], pending["never"]
    assert pending["never"]["podSets"] == [{"podSet": "pods", "pods": 1, "eligibleNodes": 2, "fitsNow": 0,
                                            "fitsEmpty": 0}]
    assert "insufficient quota" in pending["queued"]["reason"], pending["queued"]
    # the bound filler is no pending object: the lint rules alone judge it
    scanned = {e["object"]["name"]: {f["rule"] for f in e["findings"]} for e in report["scanned"]}
    assert "filler" not in pending and "GG101" in scanned.get("filler", set()), scanned

    assert table_code == 0, f"--fail-on none exits 0: {table_code}\n{table_err}"
    # the object rows (the lines under each are indented)
    rows = [line.split()[:3] for line in table.splitlines()
            if line[:1].strip() and line.split()[0] in VERDICTS]
    assert [r[0] for r in rows] == ["never", "never", "never", "waits", "fits"], table
    assert rows[0][1:] == ["Job", f"{ns}/never"], table     # most pods waiting first among the nevers
    assert {r[2] for r in rows} == {f"{ns}/{name}" for name in pending}, table

    # the same verdicts from a snapshot of the cluster
    assert snap_code == 0, snap_err
    code, out, err = _finish(_audit(e2e, "--cluster", str(snapshot), "-f", "json", "-n", ns))
    assert code == 1, err
    from_file = json.loads(out)
    assert _verdicts(from_file) == _verdicts(report)
    assert from_file["scanned"] == report["scanned"]


# -- PolicyReports --------------------------------------------------------------------------

def test_write_reports_created_kept_updated_and_deleted(crds: Session, ignored_namespace: str, namespace: str,
                                                        made: list[str]) -> None:
    """``--write-reports -n NS``: NS's PolicyReport ``gpugate`` holds a result per verdict
    and per lint finding; a run that changes nothing leaves it alone, one without the
    never-job updates it in place, one with nothing left to say deletes it; another
    namespace's report is left as it is."""
    e2e, ns, other = crds, ignored_namespace, namespace
    reports: Any = k8s.CustomObjectsApi(e2e.api_client)
    # another namespace's report, as an earlier audit of it wrote it: a run scoped to ns
    # must leave it as it is, though that namespace has no results now
    kept = reports.create_namespaced_custom_object(*REPORTS[:2], other, REPORTS[2], {
        "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": "gpugate", "labels": {"app.kubernetes.io/managed-by": "gpugate"}},
        "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        "results": [{"policy": "gpugate-feasibility", "rule": "nodes-never-hold", "result": "fail",
                     "message": "from an earlier run"}]})

    _node(e2e, made, f"{ns}-0", ns, "any")
    clean = _job(ns, "clean", 1, affinity=usage_affinity())       # no finding: no result
    plain = _job(ns, "plain", 1)                                  # bound, GG101 (a warning)
    for job in (clean, plain):
        assert e2e.api.create(job).status == 201
    bound_pods(e2e, ns, 2)
    for job in (_job(ns, "never", 16), _job(ns, "waits", 8), _job(ns, "fits", 1, volumes=MISSING_PVC)):
        assert e2e.api.create(job).status == 201
    _scheduler_said(e2e, ns, 3)
    jobs = {j["metadata"]["name"]: j["metadata"]["uid"] for j in e2e.api.list("batch/v1", "Job", ns)}

    def write() -> str:
        code, _, err = _finish(_audit(e2e, "-n", ns, "--write-reports", "--fail-on=none", "-o", os.devnull))
        assert code == 0, err
        return err

    def read() -> dict[str, Any]:
        return dict(reports.get_namespaced_custom_object(*REPORTS[:2], ns, REPORTS[2], "gpugate"))

    def results(report: dict[str, Any]) -> set[tuple[str, str, str, str]]:
        found = set()
        for r in report["results"]:
            (resource,) = r["resources"]
            assert resource["uid"] == jobs[resource["name"]], r
            found.add((resource["name"], r["policy"], r["rule"], r["result"]))
        return found

    assert "1 created, 0 updated, 0 unchanged, 0 deleted" in write()
    first = read()
    assert first["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpugate"}
    lint = {(name, "GG101", "usage-affinity", "warn") for name in ("plain", "never", "waits", "fits")}
    assert results(first) == {("never", "gpugate-feasibility", "nodes-never-hold", "fail"),
                              ("waits", "gpugate-feasibility", "waits-for-room", "warn"),
                              ("fits", "gpugate-feasibility", "fits", "pass")} | lint, first["results"]
    assert first["summary"] == {"pass": 1, "fail": 1, "warn": 5, "error": 0, "skip": 0}, first["summary"]
    never = next(r for r in first["results"] if r["rule"] == "nodes-never-hold")
    assert never["properties"]["gpugateRule"] == "GG403" and never["properties"]["verdict"] == "never", never
    assert never["properties"]["systemSays"].startswith("scheduler: 0/"), never

    # nothing changed: not rewritten
    assert "0 created, 0 updated, 1 unchanged, 0 deleted" in write()
    assert read()["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    # the never-job gone: its result goes, the report is the same object
    _delete_jobs(e2e, ns, "never")
    assert "0 created, 1 updated, 0 unchanged, 0 deleted" in write()
    second = read()
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert results(second) == results(first) - {("never", "gpugate-feasibility", "nodes-never-hold", "fail"),
                                                ("never", "GG101", "usage-affinity", "warn")}
    assert second["summary"] == {"pass": 1, "fail": 0, "warn": 4, "error": 0, "skip": 0}, second["summary"]

    # nothing pending and no finding left (the clean Job still runs): the report is deleted
    _delete_jobs(e2e, ns, "waits", "fits", "plain")
    assert "0 created, 0 updated, 0 unchanged, 1 deleted" in write()
    with pytest.raises(k8s.ApiException) as gone:
        read()
    assert gone.value.status == 404
    assert [j["metadata"]["name"] for j in e2e.api.list("batch/v1", "Job", ns)] == ["clean"]

    # the other namespace's report was never touched
    after = reports.get_namespaced_custom_object(*REPORTS[:2], other, REPORTS[2], "gpugate")
    assert after["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"]


# -- the webhook's periodic audit -------------------------------------------------------------

def test_periodic_audit_puts_events_on_jobs_that_never_run(crds: Session, ignored_namespace: str,
                                                           made: list[str], tmp_path: Path) -> None:
    """``gpugate serve --audit-interval 1`` beside the session's webhook, on the same cluster:
    the Job that can never run gets one Warning Event (its count grows with later runs, never
    a second Event); the Job that waits gets none; the metrics count both by verdict."""
    e2e, ns = crds, ignored_namespace
    _node(e2e, made, f"{ns}-0", ns, "any")
    assert e2e.api.create(_job(ns, "filler", 8)).status == 201
    bound_pods(e2e, ns, 1)
    for job in (_job(ns, "never", 16), _job(ns, "waits", 8)):
        assert e2e.api.create(job).status == 201
    uids = {j["metadata"]["name"]: j["metadata"]["uid"] for j in e2e.api.list("batch/v1", "Job", ns)}
    auditor = Gpugate(tmp_path / "auditor", e2e.cluster.kubeconfig, POLICY, "--audit-interval", "1",
                      certs=(e2e.gate.cert, e2e.gate.key, e2e.gate.ca_bundle))
    try:
        auditor.wait_ready()

        def events() -> list[dict[str, Any]]:
            return [e for e in e2e.api.list("v1", "Event", ns) if e.get("reason") == "GpugateNeverFits"]

        def counted_twice() -> list[dict[str, Any]]:
            found = events()
            return found if found and all(e.get("count", 0) >= 2 for e in found) else []

        found = wait_until(counted_twice, 60, 0.5)
        assert found, f"no Event counted twice in {ns}:\n{auditor.log()}"
        (event,) = found
        involved = event["involvedObject"]
        assert (involved["kind"], involved["name"], involved["uid"]) == ("Job", "never", uids["never"])
        assert event["type"] == "Warning" and event["source"]["component"] == "gpugate"
        assert "16" in event["message"] and event["message"].endswith("(GG403)"), event["message"]
        def recorded() -> list[tuple[str, dict[str, str], float]]:
            # a run's numbers reach the metrics when its child has ended, after its Events
            samples = auditor.samples()
            ok = sum(s[2] for s in samples if s[0] == "gpugate_audit_runs_total" and s[1]["result"] == "ok")
            return samples if ok >= 2 else []

        samples = wait_until(recorded, 30, 0.5)
        assert samples, auditor.metrics_text()
        pending = {(s[1]["verdict"], s[1]["cause"]): s[2] for s in samples
                   if s[0] == "gpugate_audit_pending_gangs"}
        assert pending.get(("never", "nodes-never-hold"), 0) >= 1, pending
        assert pending.get(("waits", "waits-for-room"), 0) >= 1, pending
    finally:
        auditor.stop()
