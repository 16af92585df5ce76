"""What the report's scoreboard should show, computed here from the summary files themselves (not with the
report's code): each head's accuracy with its 95% interval on the headline benchmark (sections and Overall:
estimate ± 1.96 recorded standard errors; cyclic: Wilson from its count) and its ECE."""

from __future__ import annotations

import json
import math
from pathlib import Path

Z95 = 1.959963984540054
SECTIONS = {"Chat": "chat", "Chat Hard": "chat_hard", "Safety": "safety", "Reasoning": "reasoning"}


def _normal(score: float, stderr: float) -> str:
    lo, hi = max(0.0, score - Z95 * stderr), min(1.0, score + Z95 * stderr)
    return f"{100 * score:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _wilson(p: float, n: int) -> str:
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n**2)) / (1 + Z95**2 / n)
    return f"{100 * p:.1f} [{100 * (centre - half):.1f}, {100 * (centre + half):.1f}]"


def eval_block(root: Path, variant: str, bench: str = "synthetic") -> dict:
    summary = json.loads((Path(root) / "eval" / variant / "summary.json").read_text(encoding="utf-8"))
    return summary["benchmarks"][bench]


def head_cells(root: Path, variant: str, bench: str = "synthetic") -> dict[str, str]:
    """{column title: cell text without its mark} for one head, from results/eval/<variant>/summary.json."""
    block = eval_block(root, variant, bench)
    cells = {"Overall": _normal(block["overall"], block["overall_stderr"])}
    for title, key in SECTIONS.items():
        cells[title] = _normal(block["sections"][key]["score"], block["sections"][key]["stderr"])
    cells["Cyclic"] = _wilson(block["cyclic"]["accuracy"], block["cyclic"]["n"])
    cells["ECE ↓"] = f"{block['calibration']['ece']:.4g}"
    return cells


def paired_change(summary: dict, decoding: str) -> str:
    """trained - base in points with the interval the policy table gives a summary without a paired block: a
    normal approximation from the two recorded intervals, each half-width taken as 1.96 standard errors."""
    block = summary["decodings"][decoding]
    b, t = block["base"], block["trained"]
    se = [(x["accuracy_ci95"][1] - x["accuracy_ci95"][0]) / (2 * Z95) for x in (t, b)]
    delta, half = t["accuracy"] - b["accuracy"], Z95 * math.hypot(*se)
    return f"{100 * delta:+.1f} pts [{100 * (delta - half):+.1f}, {100 * (delta + half):+.1f}]"


def unmarked(text: str) -> str:
    """A cell's text without its mark symbol (★ ☆ ▲ ≈ ▼ ⚠ and the space after it)."""
    return text[2:] if text[:1] in "★☆▲≈▼⚠" and text[1:2] == " " else text
