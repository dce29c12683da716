"""docs/rules.md is generated (``gpugate rules --markdown``); the committed copy must be
current, and every link into it (SARIF helpUri, its own table) must land on a heading."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lint import rulesdoc
from lint.formats import rule_anchor
from policies.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
RULES_MD = ROOT / "docs" / "rules.md"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, punctuation dropped,
    spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def generated() -> str:
    return rulesdoc.markdown(list(all_rules().values()))


def test_committed_rules_md_is_current() -> None:
    assert RULES_MD.is_file(), "docs/rules.md is missing: run `make rules-doc`"
    assert RULES_MD.read_text(encoding="utf-8") == generated(), \
        "docs/rules.md is out of date: run `make rules-doc` (gpugate rules --markdown > docs/rules.md)"


def test_the_command_writes_the_same_text() -> None:
    result = subprocess.run([sys.executable, "-m", "gpugate", "rules", "--markdown"], capture_output=True,
                            text=True, check=True, cwd=ROOT)
    assert result.stdout == generated()


def test_every_rule_has_a_heading_with_its_anchor_and_examples() -> None:
    text = generated()
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}
    for rule in all_rules().values():
        assert rule_anchor(rule.id, rule.slug) in anchors, rule.id
        section = text.split(f"### {rule.id} {rule.slug}\n", 1)[1].split("\n### ", 1)[0]
        assert f"**default severity** {rule.severity}" in section
        assert "**Passes:**" in section and "**Fails:**" in section, rule.id
        assert "```yaml pass" not in section  # examples are rendered, not left as raw fences


def test_table_links_resolve() -> None:
    text = generated()
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) == len(all_rules())
    assert set(links) <= anchors


@pytest.mark.parametrize("rule_id", list(all_rules()))
def test_summary_is_one_line(rule_id: str) -> None:
    summary = all_rules()[rule_id].summary
    assert summary and "\n" not in summary and "  " not in summary


def test_headings_inside_a_doc_are_demoted() -> None:
    doc = "Intro.\n\n# Why\n\n```yaml\n# a comment, not a heading\n```\n"
    demoted = rulesdoc._demote_headings(doc, 3)
    assert "#### Why" in demoted and "\n# a comment, not a heading\n" in demoted


def test_pre_commit_hook_runs_the_linter() -> None:
    import tomllib

    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    [hook] = [h for h in hooks if h["id"] == "gpugate"]
    assert hook["entry"] == "gpugate lint" and hook["language"] == "python"
    assert set(hook["types_or"]) == {"yaml", "json"}  # types_or: either; `types` would demand both
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["gpugate"] == "gpugate.cli:main"


def test_demo_lint_step_runs(capfd: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo", ROOT / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.step_lint_examples() is True
    out = capfd.readouterr().out
    assert "$ gpugate lint examples" in out and "(exit code 1)" in out
    assert re.search(r"^\d+ files, \d+ documents", out, re.MULTILINE)


def test_each_rule_shows_its_options_with_type_default_and_doc() -> None:
    text = generated()
    for rule in all_rules().values():
        section = text.split(f"### {rule.id} {rule.slug}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for option in rule.options:
            [row] = [line for line in section.splitlines() if line.startswith(f"| `{option.path}` |")]
            assert option.type.replace("|", "\\|") in row and " ".join(option.doc.split())[:30] in row


def test_the_policy_file_reference_lists_every_option() -> None:
    from policies.config import option_table

    reference = generated().split("\n## Policy file reference\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ", 1)[0].removeprefix("| ") for line in reference.splitlines()
            if line.startswith("| `")]
    assert rows == [f"`{o.path}`" for o in option_table().options]
    assert "`policies.gpu`" in reference and "| `usage.nodeKey` |" in reference
