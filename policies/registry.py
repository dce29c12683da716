"""The rule registry: every module in :mod:`policies.rules` is one rule.

A rule module, like a yamllint rule, is its own documentation::

    \"\"\"One-line summary.

    Why it matters, what it checks, defaults (markdown).

    ```yaml pass
    <a manifest that passes>
    ```

    ```yaml fail
    <a manifest that fails>
    ```
    \"\"\"
    ID = "GG202"
    SLUG = "gpu-group-size-divisible"
    SEVERITY = Severity.ERROR
    SEES = Sees(pod_sets=True)
    OPTIONS = (GROUP_SIZE_ANNOTATION, "gpu.resources")

    def check(workload: Workload, ctx: Context) -> Iterable[Problem]: ...

``SEES`` (:class:`policies.context.Sees`) declares which objects the rule looks at; the
engine calls its ``check`` and ``mutate`` only on those (no ``SEES``: every object).
``check`` may return any iterable: a generator, or a list (empty, or ``()``, when the
rule cannot fire: a plain return is cheaper than a generator that yields nothing). A
rule whose problems depend only on the content of a pod spec (and the policy) reports
them through
:func:`policies.spec_problems.pod_set_problems`, so that equal pod specs are judged once.

``OPTIONS`` lists the policy-file options the rule reads (:mod:`policies.options`): an
:class:`~policies.options.Option` it declares (it owns the key), one it imports from the
domain module that owns it, or the dotted path of one another rule declares. The policy
schema and defaults are generated from these declarations (:mod:`policies.config`), and
the rules reference shows them.

Optional module attributes: ``NEEDS_TOPOLOGY = True`` (runs only when a cluster
snapshot is given), ``STAGE = "input"`` (reported by the front end's parser, no
``check``), and ``mutate(workload, ctx) -> Iterable[tuple[Problem, list[PatchOp]]]`` for
rules that change the object (their problems are ``fixable``).

Fenced blocks in the docstring are the rule's examples and run as tests: ``yaml pass``
and ``yaml fail`` are manifests (several documents allowed), ``yaml policy`` is a policy
file and ``yaml cluster`` a cluster snapshot used by the examples of that rule.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from policies.findings import Problem, Severity
from policies.options import Option


@dataclass(frozen=True)
class Example:
    role: str           # pass | fail | policy | cluster
    text: str


@dataclass(frozen=True)
class Rule:
    id: str
    slug: str
    severity: Severity
    doc: str
    module: str
    check: Callable[..., Iterable[Problem]] | None
    mutate: Callable[..., Iterable[tuple[Problem, list[dict[str, Any]]]]] | None
    needs_topology: bool
    stage: str
    # The options the rule reads, its own and those declared elsewhere.
    options: tuple[Option, ...] = ()
    # The options this rule declares (owns).
    declares: tuple[Option, ...] = ()
    # The module's ``SEES`` (a policies.context.Sees: what objects the engine shows it);
    # None: every object.
    sees: Any = None

    @property
    def summary(self) -> str:
        """The first paragraph of the doc, on one line."""
        first = re.split(r"\n[ \t]*\n", self.doc.strip(), maxsplit=1)[0]
        return " ".join(first.split())

    @property
    def prose(self) -> str:
        """The doc without its example blocks."""
        return re.sub(r"\n{3,}", "\n\n", _FENCE.sub("", self.doc)).strip()

    @property
    def examples(self) -> list[Example]:
        return [Example(role, _dedent(body)) for role, body in _FENCE.findall(self.doc)]


_FENCE = re.compile(r"^[ \t]*```yaml (pass|fail|policy|cluster)[ \t]*\n(.*?)^[ \t]*```[ \t]*$",
                    re.MULTILINE | re.DOTALL)


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text)


def _rule_from_module(module: ModuleType, options: tuple[Option, ...] = (),
                      declares: tuple[Option, ...] = ()) -> Rule:
    return Rule(
        id=module.ID,
        slug=module.SLUG,
        severity=module.SEVERITY,
        doc=_dedent(module.__doc__ or ""),
        module=module.__name__,
        check=getattr(module, "check", None),
        mutate=getattr(module, "mutate", None),
        needs_topology=getattr(module, "NEEDS_TOPOLOGY", False),
        stage=getattr(module, "STAGE", "mutate" if hasattr(module, "mutate") else "validate"),
        options=options,
        declares=declares,
        sees=getattr(module, "SEES", None),
    )


def _resolve_options(modules: list[ModuleType]) -> dict[str, tuple[tuple[Option, ...], tuple[Option, ...]]]:
    """(options read, options declared) per rule module: ``OPTIONS`` entries that are paths
    are looked up among the :class:`Option` objects of every rule's ``OPTIONS``."""
    known: dict[str, Option] = {}
    for module in modules:
        for entry in getattr(module, "OPTIONS", ()):
            if isinstance(entry, Option):
                if known.setdefault(entry.path, entry) is not entry:
                    raise RuntimeError(f"policy option {entry.path!r} is declared twice "
                                       f"(again in {module.__name__})")
            elif not isinstance(entry, str):
                raise RuntimeError(f"{module.__name__}: OPTIONS entries are Option or a dotted path, "
                                   f"not {type(entry).__name__}")
    out: dict[str, tuple[tuple[Option, ...], tuple[Option, ...]]] = {}
    for module in modules:
        options: list[Option] = []
        for entry in getattr(module, "OPTIONS", ()):
            if isinstance(entry, str):
                if entry not in known:
                    raise RuntimeError(f"{module.__name__}: OPTIONS names {entry!r}, which no rule declares")
                entry = known[entry]
            options.append(entry)
        declared = tuple(o for o in options if o.owner == module.__name__)
        out[module.__name__] = (tuple(options), declared)
    return out


RULES_PACKAGE = "policies.rules"
_RULES: dict[str, Rule] | None = None


def all_rules() -> dict[str, Rule]:
    """Rules by ID, in ID order. Imported once, on first use."""
    global _RULES
    if _RULES is None:
        # Rules are plugins: found by name at run time, so that the layers below them (and
        # the policy file, whose options they declare) never import them.
        package = importlib.import_module(RULES_PACKAGE)
        modules: list[ModuleType] = []
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if hasattr(module, "ID"):
                modules.append(module)
        options = _resolve_options(modules)
        found: dict[str, Rule] = {}
        for module in modules:
            rule = _rule_from_module(module, *options[module.__name__])
            if rule.id in found:
                raise RuntimeError(f"duplicate rule id {rule.id} in {module.__name__}")
            found[rule.id] = rule
        _RULES = dict(sorted(found.items()))
    return _RULES


def get_rule(rule_id: str) -> Rule:
    return all_rules()[rule_id]


def iter_rules(stage: str) -> Iterator[Rule]:
    return (r for r in all_rules().values() if r.stage == stage)
