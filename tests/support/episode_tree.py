"""A multi-turn run in a results tree (train_grpo's config, metrics and summary, eval_policy's summary with its
`episodes` blocks, in the shapes the stages write), and the check that the report's multi-turn tables show the
summaries' figures: each cell read back from report.md as rendered and compared, number by number, with the
summary field it stands for (a mapping written here, not the report's)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support.markdown_tables import tables

PAIRED_HEADER = ["Run", "Decoding", "Measure", "Base", "Trained", "Change [95%]", "Verdict", "Questions"]
# measure -> (path of a side's value with {side}, path of the paired block, shown as a percentage)
MEASURES = {
    "exact match": (("{side}", "accuracy"), ("paired",), True),
    "token F1": (("episodes", "{side}", "f1"), ("episodes", "f1_paired"), True),
    "tool calls per episode": (
        ("episodes", "{side}", "calls_per_episode"),
        ("episodes", "calls_paired"),
        False,
    ),
    "support recall": (("episodes", "{side}", "support_recall"), ("episodes", "support_recall_paired"), True),
}
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def at_path(block: dict, path: tuple[str, ...], side: str = "") -> Any:
    """The value at `path` in a summary block ({side} filled in)."""
    for key in path:
        block = block[key.format(side=side)]
    return block


def _paired(values: list[tuple[float, float]], n: int) -> dict[str, Any]:
    delta = sum(t - b for t, b in values) / n
    return {"delta": delta, "ci": [delta - 0.1, delta + 0.05], "n": n, "confidence": 0.95, "samples": 200}


def _decoding(per_question: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """An eval_policy decoding block from per-question (trained, base) values of each measure."""
    n = len(per_question["em"])

    def mean(name: str, i: int) -> float:
        return sum(v[i] for v in per_question[name]) / n

    sides = {side: i for side, i in (("trained", 0), ("base", 1))}
    block: dict[str, Any] = {
        side: {"accuracy": mean("em", i), "accuracy_ci95": [0.0, 1.0], "n": n, "mean_length": 40.0}
        for side, i in sides.items()
    }
    block["paired"] = _paired(per_question["em"], n)
    block["episodes"] = {
        side: {"f1": mean("f1", i), "calls_per_episode": mean("calls", i), "support_recall": mean("recall", i),
               "answered": 1.0}
        for side, i in sides.items()
    }  # fmt: skip
    for name, key in (("f1", "f1_paired"), ("calls", "calls_paired"), ("recall", "support_recall_paired")):
        block["episodes"][key] = _paired(per_question[name], n)
    return block


def episode_metrics(steps: int, wrong_from: int) -> list[dict[str, Any]]:
    """train_grpo's metrics.jsonl rows of a multi-turn run: calls rise, a wrong mask trains environment tokens
    from `wrong_from` on, the token budget ends 30% of the episodes at turn 1 from step 2."""
    rows = []
    for t in range(steps):
        wrong = 0.25 if t >= wrong_from else 0.0
        rows.append(
            {"step": t, "reward_mean": 0.1 + 0.05 * t, "episode/answered_rate": 0.8 + 0.02 * t,
             "episode/calls_mean": 1.0 + 0.1 * t, "episode/turns_mean": 2.0 + 0.1 * t,
             "episode/env_token_share": 0.5 + 0.01 * t, "truncated_ratio": 0.3 if t >= 2 else 0.0,
             "episode/env_malformed_call": 0.05, "episode/env_empty_result": 0.0,
             "episode/context_turn0": 38.0 + t, "episode/truncated_turn0": 0.0,
             "episode/context_turn1": 70.0 + t, "episode/truncated_turn1": 0.3 if t >= 2 else 0.0,
             "episode/env_trained_share": wrong, "env_loss_share": wrong, "prompt_loss_share": 0.0,
             "episode/support_recall": 0.5 + 0.04 * t, "episode/answer_in_results": 0.6, "entropy": 1.0,
             "grad_norm": 1.0, "frac_reward_zero_std": 0.1, "completion_length_mean": 60.0}
        )  # fmt: skip
    return rows


def write_episode_run(
    root: Path,
    run: str,
    steps: int = 10,
    wrong_from: int = 6,
    scale: float = 1.0,
    tree: tuple = ("synthetic-default", 0),
) -> dict[str, Any]:
    """A multi-turn run's train_grpo and eval_policy outputs under root; returns the eval_policy summary.
    `scale` multiplies the trained policy's per-question values (another seed's figures); `tree`: (experiment,
    seed) its configs record."""
    questions = range(8)
    greedy = {
        "em": [(scale * float(i % 4 != 0), float(i % 3 == 0)) for i in questions],
        "f1": [(scale * (0.9 if i % 4 else 0.3), 0.2 + 0.05 * i) for i in questions],
        "calls": [(scale * 2.0, 1.0 + (i % 2)) for i in questions],
        "recall": [(scale * (1.0 if i % 4 else 0.5), 0.5) for i in questions],
    }
    sampled = {k: [(t * 0.75, b) for t, b in v] for k, v in greedy.items()}
    summary = {"stage": "eval_policy", "n_prompts": 8, "decoding": "greedy",
               "decodings": {"greedy": _decoding(greedy), "sampled": _decoding(sampled)}}  # fmt: skip
    episodes = {"enabled": True, "environment": "search", "max_turns": 2, "max_episode_tokens": 128}
    config = {"experiment": tree[0], "seed": tree[1], "run": run, "beta": 0.0, "episodes": episodes,
              "rewards": [{"type": "verifier", "weight": 1.0}]}  # fmt: skip
    files = {
        f"grpo/{run}/config.json": {"stage": "train_grpo", "config": config},
        f"grpo/{run}/summary.json": {"stage": "train_grpo", "steps": steps, "seconds_per_step": 1.0},
        f"policy_eval/{run}/config.json": {"stage": "eval_policy", "config": config},
        f"policy_eval/{run}/summary.json": summary,
    }
    for rel, obj in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(obj), encoding="utf-8")
    lines = "".join(json.dumps(r) + "\n" for r in episode_metrics(steps, wrong_from))
    (root / f"grpo/{run}/metrics.jsonl").write_text(lines, encoding="utf-8")
    return summary


def _numbers(cell: str, share: bool) -> list[float]:
    """The figures of a cell in the summaries' units (a percentage or points back to a share)."""
    return [float(x) / (100 if share else 1) for x in NUMBER.findall(cell)]


def check_paired_table(markdown: str, summaries: dict[str, dict[str, Any]]) -> int:
    """Every row of the report's before/after episodes table against its run's eval_policy summary: base,
    trained, trained - base and its interval to the shown precision; returns the number of rows checked."""
    (table,) = [t for t in tables(markdown) if t.header == PAIRED_HEADER]
    for run, decoding, measure, base, trained, change, _verdict, n in table.rows:
        block = summaries[run]["decodings"][decoding]
        side_path, paired_path, share = MEASURES[measure]
        paired = at_path(block, paired_path)
        tol = (0.0005 if share else 0.005) + 1e-9  # one decimal of a percentage; three significant digits
        expected = {
            base: [at_path(block, side_path, "base")],
            trained: [at_path(block, side_path, "trained")],
            change: [paired["delta"], *paired["ci"]],
        }
        for cell, want in expected.items():
            got = _numbers(cell, share)
            assert len(got) == len(want) and all(abs(g - w) <= tol for g, w in zip(got, want, strict=True)), (
                f"{run} {decoding} {measure}: {cell!r} shows {got}, the summary has {want}"
            )
        assert int(n) == paired["n"]
    return len(table.rows)


def scoreboard_row(markdown: str, run: str) -> dict[str, str]:
    """The multi-turn scoreboard's row of a run: {column: cell text}."""
    (board,) = [t for t in tables(markdown) if t.header[:2] == ["Run", "Exact match, greedy [95%]"]]
    rows = {row[0]: dict(zip(board.header, row, strict=True)) for row in board.rows}
    return rows[run]
