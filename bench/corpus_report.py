"""Per-rule finding counts of ``gpugate lint`` over the corpus of real manifests.

    .venv/bin/python bench/corpus_report.py [CORPUS] [--samples N] [--config POLICY]

Prints one row per rule (id, slug, findings, files with a finding) and, with
``--samples``, the first N findings of each rule, to eyeball for false positives.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lint.cli import iter_files, lint_text  # noqa: E402
from lint.policyfile import load_policy  # noqa: E402
from lint.report import Located, Report  # noqa: E402
from policies.config import Policy  # noqa: E402
from policies.registry import all_rules  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def lint_corpus(corpus: Path, policy: Policy) -> Report:
    report = Report()
    for name in iter_files([str(corpus)]):
        lint_text(Path(name).read_bytes(), str(Path(name).relative_to(corpus)), policy, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--samples", type=int, default=0, help="findings to print per rule")
    parser.add_argument("--config", help="policy file (default: the built-in defaults)")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    policy = load_policy(args.config) if args.config else Policy()
    report = lint_corpus(args.corpus, policy)

    by_rule: dict[str, list[Located]] = defaultdict(list)
    for loc in report.findings:
        by_rule[loc.finding.rule].append(loc)
    s = report.summary()
    print(f"{s['files']} files, {s['documents']} documents ({s['skipped']} skipped): "
          f"{s['errors']} errors, {s['warnings']} warnings, {s['infos']} infos")
    print(f"{'rule':<8} {'slug':<32} {'findings':>8} {'files':>6}  severities")
    rules = all_rules()
    for rule_id in sorted(set(rules) | set(by_rule)):
        found = by_rule.get(rule_id, [])
        slug = rules[rule_id].slug if rule_id in rules else found[0].finding.slug
        severities = Counter(str(f.finding.severity) for f in found)
        print(f"{rule_id:<8} {slug:<32} {len(found):>8} {len({f.file for f in found}):>6}  "
              + ", ".join(f"{n} {sev}" for sev, n in sorted(severities.items())))
    if args.samples:
        for rule_id, found in sorted(by_rule.items()):
            print(f"\n== {rule_id} ({len(found)})")
            for loc in found[: args.samples]:
                print(f"  {loc.file}:{loc.line}: {loc.finding.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
