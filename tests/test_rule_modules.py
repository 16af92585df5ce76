"""Every rule's entry module exists and the rule table of docs/reference/outputs.md names it.

A rule runs `python -m prefpipe.<module>` (through common.smk's `stage_shell`, or spelled out). Most modules carry
their rule's name; the rule table is where the exceptions are read (train_reward_model runs
prefpipe.train_reward, export_reward_model prefpipe.export_reward, the al_* rules prefpipe.active_*), so each
rule's module must appear in the table row of that rule.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE = re.compile(r"^rule (\w+):", re.M)
MODULE = re.compile(r'stage_shell\(\s*"(\w+)"|python -m prefpipe\.(\w+)')
ROW = re.compile(r"^\| `([\w*]+)`[^|]*\| ([^|]+) \|", re.M)


def rule_modules() -> dict[str, str]:
    """rule name -> the prefpipe module its shell runs (rules without a stage module are left out)."""
    found = {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = path.read_text()
        starts = [(m.start(), m.group(1)) for m in RULE.finditer(text)] + [(len(text), "")]
        for (start, name), (end, _) in zip(starts, starts[1:], strict=False):
            hit = MODULE.search(text, start, end)
            if hit:
                found[name] = hit.group(1) or hit.group(2)
    return found


def readme_rows(text: str) -> dict[str, set[str]]:
    """The rule table: rule (or rule pattern such as al_*) -> the prefpipe modules its row names."""
    return {m.group(1): set(re.findall(r"`prefpipe\.(\w+)`", m.group(2))) for m in ROW.finditer(text)}


def test_every_rule_module_exists_and_the_readme_names_it():
    rules = rule_modules()
    assert {"train_grpo", "train_reward_model", "al_score", "report"} <= set(rules)
    rows = readme_rows((ROOT / "docs" / "reference" / "outputs.md").read_text())
    problems = []
    for rule, module in sorted(rules.items()):
        package = ROOT / "src" / "prefpipe" / module
        if not (package.with_suffix(".py").is_file() or (package / "__main__.py").is_file()):
            problems.append(f"rule {rule} runs prefpipe.{module}, which does not exist")
        named = [mods for pattern, mods in rows.items() if fnmatch.fnmatchcase(rule, pattern)]
        if not any(module in mods for mods in named):
            problems.append(
                f"docs/reference/outputs.md's rule table has no row for rule {rule} naming `prefpipe.{module}`"
            )
    assert not problems, "\n".join(problems)


def test_the_table_reader_reads_patterns():
    text = "| `al_*` (5 rules) | `prefpipe.active_label`, `prefpipe.active_curve` | out |\n| `report` | `prefpipe.report` | x |"
    assert readme_rows(text) == {"al_*": {"active_label", "active_curve"}, "report": {"report"}}
