"""``gpugate snapshot`` on clusters with and without the optional CRDs (Volcano Queues and
PodGroups, HyperNodes, ElasticQuotaTrees), against the local list/watch double."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_apiserver import FakeApiServer

from webhook.cli import snapshot_main

# keyed as FakeApiServer keys them: the plural, or plural.group for a second kind of one plural
OPTIONAL = {key: r.label for key, r in FakeApiServer().resources.items() if r.optional}


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": "a"}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                                   "nvidia.com/gpu": "8"}}}


def pod(name: str, on: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}}


def hypernode(name: str, members: list[str]) -> dict[str, Any]:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": m}}}
                                            for m in members]}}


@pytest.fixture
def bare() -> Iterator[FakeApiServer]:
    """A cluster with Nodes and Pods and none of the optional CRDs."""
    with FakeApiServer() as fake:
        fake.add(node("n0"), node("n1"), pod("a", "n0"))
        for plural in OPTIONAL:
            fake.uninstall(plural)
        yield fake


def snapshot(server: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             ) -> tuple[int, dict[str, Any] | None, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    out = tmp_path / "cluster.yaml"
    code = snapshot_main(["--kubeconfig", str(kubeconfig), "-o", str(out)])
    document = yaml.safe_load(out.read_text()) if out.exists() else None
    return code, document, capsys.readouterr().err


def kinds(document: dict[str, Any]) -> list[str]:
    return sorted(o["kind"] for o in document["items"])


def test_snapshot_without_any_optional_crd(bare: FakeApiServer, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, document, err = snapshot(bare, tmp_path, capsys)
    assert code == 0, err
    assert document is not None and document["kind"] == "List"
    assert kinds(document) == ["Node", "Node", "Pod"]
    for kind in OPTIONAL.values():   # each absent kind named on stderr, once
        assert err.count(f"no {kind} in the snapshot") == 1, err
    assert "CRD not installed" in err
    assert "wrote 2 Node, 1 Pod to" in err
    # what it wrote is a cluster the linter and `gpugate serve --cluster` read
    load_clusters = pytest.importorskip("lint.cluster").load_clusters
    from policies.config import Policy

    (loaded,) = load_clusters([str(tmp_path / "cluster.yaml")], Policy())
    assert loaded.topology.counts()["Node"] == 2


def test_snapshot_includes_hypernodes_when_present(bare: FakeApiServer, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bare.install("hypernodes")
    bare.install("queues")          # served, but no Queue: listed as 0, not absent
    bare.add(hypernode("rack-1", ["n0", "n1"]))
    code, document, err = snapshot(bare, tmp_path, capsys)
    assert code == 0, err
    assert document is not None and kinds(document) == ["HyperNode", "Node", "Node", "Pod"]
    (rack,) = [o for o in document["items"] if o["kind"] == "HyperNode"]
    assert rack["apiVersion"] == "topology.volcano.sh/v1alpha1" and rack["spec"]["tier"] == 1
    assert "no HyperNode" not in err and "no Queue" not in err
    assert "no PodGroup in the snapshot" in err and "no ElasticQuotaTree in the snapshot" in err
    assert "1 HyperNode" in err and "0 Queue" in err


def test_snapshot_skips_an_optional_kind_it_may_not_read(bare: FakeApiServer, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bare.install("queues")
    bare.forbidden.add("queues")
    code, document, err = snapshot(bare, tmp_path, capsys)
    assert code == 0, err
    assert document is not None and "Queue" not in kinds(document)
    assert "no Queue in the snapshot" in err and "forbidden (403)" in err


@pytest.mark.parametrize("plural", ["nodes", "pods"])
def test_snapshot_fails_without_nodes_or_pods(bare: FakeApiServer, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str], plural: str) -> None:
    bare.forbidden.add(plural)
    code, document, err = snapshot(bare, tmp_path, capsys)
    assert code == 2 and document is None
    assert f"cannot list {plural}: the API server answered 403" in err


def test_snapshot_of_the_workloads_with_kubectls_kubeconfig(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workloads`` adds the kinds of the kinds table the API server serves (what ``gpugate
    audit --cluster FILE`` judges); without ``--kubeconfig`` the first file of ``$KUBECONFIG``
    that exists is read, as kubectl does."""
    import os

    from webhook.kube import RESOURCES, Resource

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    served = (*RESOURCES, Resource("Job", "batch", "v1", "jobs", optional=True, name="Job.batch"))
    with FakeApiServer(served) as fake:
        fake.add(node("n0"), pod("a", "n0"), job)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(fake.kubeconfig()))
        monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}{os.pathsep}{kubeconfig}")
        for extra, expected in (([], ["Node", "Pod"]), (["--workloads"], ["Job", "Node", "Pod"])):
            out = tmp_path / "cluster.yaml"
            assert snapshot_main([*extra, "-o", str(out)]) == 0, capsys.readouterr().err
            assert kinds(yaml.safe_load(out.read_text())) == expected
