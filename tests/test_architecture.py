"""The layers hold: the import-linter contracts of pyproject.toml (``[tool.importlinter]``), and
no import cycle between any two modules of gpugate's packages.

Imports inside functions and under ``TYPE_CHECKING`` count: a cycle that only closes at run
time is still a cycle (and a layer crossed inside a function is still crossed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpugate", "policies", "lint", "webhook", "audit")


def test_import_contracts_are_kept() -> None:
    """``lint-imports`` (import-linter, from this interpreter's environment) over the contracts
    in pyproject.toml: policies imports no front end, lint and webhook are independent, the
    layers gpugate > (lint | webhook) > policies, no cycles between siblings."""
    pytest.importorskip("importlinter", reason="import-linter is in the [test] extra")
    script = Path(sys.executable).parent / "lint-imports"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "importlinter.cli"]
    done = subprocess.run([*command, str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"import contracts broken:\n{done.stdout}\n{done.stderr}"


def _cycles(graph: object, modules: set[str]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one
    module, or of one module importing itself (Tarjan's algorithm, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules)  # type: ignore[attr-defined]
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    cycles = []
    for component in components:
        members = set(component)
        first = component[0]
        # the shortest way from first back to itself, within the component
        previous: dict[str, str] = {}
        frontier = [first]
        found = None
        while frontier and found is None:
            following = []
            for node in frontier:
                for target in edges[node]:
                    if target == first:
                        found = node
                        break
                    if target in members and target not in previous:
                        previous[target] = node
                        following.append(target)
                if found is not None:
                    break
            frontier = following
        path = [first]
        node = found if found is not None else first
        while node != first:
            path.insert(1, node)
            node = previous[node]
        cycles.append(path + [first])
    return cycles


def _describe(graph: object, cycle: list[str]) -> str:
    steps = []
    for importer, imported in zip(cycle, cycle[1:], strict=False):
        details = graph.get_import_details(importer=importer, imported=imported)  # type: ignore[attr-defined]
        lines = ", ".join(f"l.{d['line_number']}" for d in details[:3])
        steps.append(f"  {importer} -> {imported} ({lines})")
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def test_no_import_cycles_between_modules() -> None:
    """grimp's import graph of gpugate's packages (import-linter's own graph builder) has no
    cycle between any two modules, whatever the package."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter ([test] extra)")
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(*PACKAGES, include_external_packages=False,
                                  exclude_type_checking_imports=False, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    cycles = _cycles(graph, set(graph.modules))
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(_describe(graph, c) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    """The finder itself, on a small graph: a -> b -> c -> a and a self-import."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter ([test] extra)")
    graph = grimp.ImportGraph()
    imports = [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.e", "p.e")]
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import")
    cycles = _cycles(graph, set(graph.modules))
    assert sorted(cycles) == [["p.a", "p.b", "p.c", "p.a"], ["p.e", "p.e"]]


def test_a_plain_lint_imports_only_what_it_needs(tmp_path: Path) -> None:
    """``gpugate lint FILE`` (no cluster, no policy file) loads no numpy (the feasibility
    engine and topology), no jsonschema (policy files, custom checks), no ruamel (--fix),
    no aiohttp or kubernetes (the webhook): each costs a one-file lint its start-up time."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n"
                        "    spec:\n      containers:\n      - name: m\n        image: x\n"
                        "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    script = ("import sys\nfrom gpugate.cli import main\n"
              f"sys.argv = ['gpugate', 'lint', '--fail-on', 'never', {str(manifest)!r}]\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "heavy = {'numpy', 'jsonschema', 'ruamel', 'aiohttp', 'kubernetes', 'policies.feasibility'}\n"
              "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy)\n"
              "print(loaded, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_no_module_of_policies_is_over_600_lines() -> None:
    """A module past 600 lines holds more than one idea: split it by concern."""
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "policies").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long
