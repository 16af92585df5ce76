"""Small data rows and folders for tests, in the shapes prep_data writes: preference pairs (a rock-paper-scissors
cycle plus arithmetic pairs) and RL prompts with answers; external pairs loaded from a flat mapping."""

from __future__ import annotations

from pathlib import Path

from prefpipe.common.io import write_jsonl
from support.settings import external_settings

RPS_PROMPTS = ("Choose a move.", "Pick one: rock, paper or scissors.", "Your move?", "Play!")
RPS_BEATS = (("paper", "rock"), ("scissors", "paper"), ("rock", "scissors"))
# (prompt, answer, kind) for rl_prompts_*.jsonl; the answers are what the verifier checks.
RL_PROMPTS = (
    ("What is 2 plus 3?", "5", "add"),
    ("Say yes.", "yes", "repeat"),
    ("Say no.", "no", "repeat"),
    ("Repeat cat:", "cat", "repeat"),
    ("What is 7 plus 1?", "8", "add"),
    ("Answer with one word.", "yes", "repeat"),
    ("What is 4 plus 4?", "8", "add"),
)


def rps_pairs() -> list[dict]:
    """Rock-paper-scissors: every pair is 'winner beats loser' under each prompt (a pure 3-cycle, 12 pairs)."""
    return [
        {
            "id": f"rps-{i}-{winner}",
            "prompt": prompt,
            "chosen": winner,
            "rejected": loser,
            "subset": "cyclic-rps",
        }
        for i, prompt in enumerate(RPS_PROMPTS)
        for winner, loser in RPS_BEATS
    ]


def arith_pairs(n: int = 6) -> list[dict]:
    """`n` chat-arith pairs whose chosen answer is right and rejected answer wrong."""
    return [
        {
            "id": f"m{i}",
            "prompt": f"What is {i} plus 1?",
            "chosen": f"The answer is {i + 1}.",
            "rejected": f"The answer is {i + 3}.",
            "subset": "chat-arith",
        }
        for i in range(n)
    ]


def write_reward_data(folder: Path) -> Path:
    """A reward stage's --data folder: 18 train pairs (the RPS cycle + 6 arithmetic), 9 test pairs."""
    rows, extra = rps_pairs(), arith_pairs(6)
    write_jsonl(folder / "pairs_train.jsonl", rows + extra)
    write_jsonl(folder / "pairs_test.jsonl", rows[:6] + extra[:3])
    return folder


def rl_rows(prompts: list[tuple[str, str, str]] | tuple = RL_PROMPTS[:6]) -> list[dict]:
    """RL prompt rows (id, prompt, answer, kind) as rl_prompts_*.jsonl holds them."""
    return [{"id": f"p{i}", "prompt": p, "answer": a, "kind": k} for i, (p, a, k) in enumerate(prompts)]


def load_pairs(cfg: dict, bad_rows: str, seed: int) -> tuple[list[dict], list[dict], dict]:
    """load_external_pairs from one flat mapping: `source` plus `data.external` keys merged over the default
    (the settings are built inside, so a bad value raises here, naming its key)."""
    from prefpipe.data.sources import load_external_pairs

    external = external_settings(**{k: v for k, v in cfg.items() if k != "source"})
    return load_external_pairs(external, cfg["source"], bad_rows, seed)
