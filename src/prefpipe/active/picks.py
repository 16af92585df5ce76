"""What each strategy's rounds selected, measured for redundancy and coverage: the evidence for why an acquisition
needs more labels than random selection when it does (docs/findings/ACTIVE_LEARNING.md, "the selected pairs").

Per strategy, seed and round r >= 1, from the round's selection.json (`added`: its picks; `labelled` without
`added`: the set labelled before it) and the experiment's training rows (`prompt`, the kind `subset`, the flip
marker `label_flipped`):
- picks: the pairs the round added; distinct_prompts: their distinct prompts;
- shared_prompt: picks whose prompt is also another pick's of the same round;
- prompt_labelled: picks whose prompt is that of a pair labelled before the round;
- flipped: picks whose stored label the data flipped (None when the rows carry no `label_flipped`);
- kinds: the distinct kinds among the picks; kind_entropy: H(picks' kind shares) / log(kinds in the round's
  pool), 1 when the picks are uniform over every kind the pool still holds (None when the pool holds one kind);
- kind_counts: picks per kind.
Per strategy: each figure per round (mean and sd over seeds), `round_mean` (per seed the mean over rounds, then
mean and sd over seeds), `total` (per seed the counts summed over rounds, then mean and sd), `kind_total` (picks
per kind summed over rounds, mean and sd over seeds) and `against_random`: per seed the strategy's round mean
minus random's on the same seed, mean and sd (random's initial set and pool are the same, so a positive
shared_prompt difference means more redundant than random).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefpipe.active.labelled import SELECTION, TRAIN
from prefpipe.active.layout import round_dir
from prefpipe.common.config import DataError
from prefpipe.common.io import read_json
from prefpipe.common.stats import mean_sd
from prefpipe.data.synthetic_noise import FLIPPED

REFERENCE = "random"  # the baseline: the curve's target (prefpipe.active.curve) and the picks' comparison
KIND = "subset"
COUNTS = ("picks", "distinct_prompts", "shared_prompt", "prompt_labelled", "flipped")
FIGURES = (*COUNTS, "kinds", "kind_entropy")


@dataclass(frozen=True)
class Pair:
    """What the analysis reads of one training pair."""

    prompt: str
    kind: str
    flipped: bool | None


def pair_facts(data: Path, rows: Iterable[dict[str, Any]]) -> dict[str, Pair]:
    """id -> Pair from the experiment's training rows (data/pairs_train.jsonl); a row needs `prompt` and `subset`."""
    facts = {}
    for row in rows:
        for key in ("prompt", KIND):
            if key not in row:
                raise DataError(
                    f"{data / TRAIN}: pair {row.get('id')!r} has no `{key}` (the picks analysis reads it)"
                )
        flip = row.get(FLIPPED)
        facts[str(row["id"])] = Pair(str(row["prompt"]), str(row[KIND]), None if flip is None else bool(flip))
    return facts


def kind_entropy(counts: Counter[str], pool_kinds: int) -> float | None:
    """Entropy of the picks' kind shares over log(pool_kinds): 1 = uniform over the pool's kinds."""
    total = sum(counts.values())
    if pool_kinds < 2 or total == 0:
        return None
    shares = [c / total for c in counts.values() if c]
    return -sum(p * math.log(p) for p in shares) / math.log(pool_kinds)


def round_picks(facts: dict[str, Pair], labelled: list[str], added: list[str], where: str) -> dict[str, Any]:
    """The figures of one round (module docstring) from its labelled ids and the ids it added."""
    unknown = sorted({*labelled, *added} - set(facts))
    if unknown:
        raise DataError(f"{where}: {len(unknown)} ids not in the training pairs, e.g. {unknown[0]}")
    if not set(added) <= set(labelled):
        raise DataError(f"{where}: `added` holds ids that are not in `labelled`")
    fresh = set(added)
    before = {i for i in labelled if i not in fresh}
    prompts = Counter(facts[i].prompt for i in added)
    before_prompts = {facts[i].prompt for i in before}
    kinds = Counter(facts[i].kind for i in added)
    pool_kinds = {pair.kind for i, pair in facts.items() if i not in before}
    flips = [facts[i].flipped for i in added]
    return {
        "picks": len(added),
        "distinct_prompts": len(prompts),
        "shared_prompt": sum(c for c in prompts.values() if c > 1),
        "prompt_labelled": sum(facts[i].prompt in before_prompts for i in added),
        "flipped": None if None in flips else sum(bool(f) for f in flips),
        "kinds": len(kinds),
        "kind_entropy": kind_entropy(kinds, len(pool_kinds)),
        "kind_counts": dict(sorted(kinds.items())),
    }


def seed_rounds(
    root: Path, facts: dict[str, Pair], strategy: str, seed: int, rounds: int
) -> list[dict[str, Any]]:
    """round_picks of rounds 1..rounds-1 of one strategy and seed, from their selection.json."""
    out = []
    for r in range(1, rounds):
        path = Path(round_dir(str(root), strategy, seed, r)) / "data" / SELECTION
        if not path.is_file():
            raise DataError(f"{path}: missing (round {r} of {strategy}, seed {seed} has not selected yet)")
        selection = read_json(path)
        out.append(round_picks(facts, list(selection["labelled"]), list(selection["added"]), str(path)))
    return out


def _stat(values: list[float | None]) -> dict[str, Any]:
    """mean_sd, or no mean when a value is missing (a figure the data cannot give)."""
    return mean_sd([]) if any(v is None for v in values) else mean_sd([float(v) for v in values])


def _over_rounds(rounds: list[dict[str, Any]], name: str, summed: bool) -> float | None:
    values = [r[name] for r in rounds]
    if None in values or not values:
        return None
    return float(sum(values)) if summed else sum(values) / len(values)


def strategy_picks(per_seed: dict[int, list[dict[str, Any]]], kinds: list[str]) -> dict[str, Any]:
    """One strategy's figures over seeds: per round, the round mean, the totals and the picks per kind (every
    kind of the training pairs, so a kind never picked shows 0)."""
    seeds = list(per_seed)
    rounds = len(next(iter(per_seed.values()), []))
    round_mean = {f: {s: _over_rounds(per_seed[s], f, False) for s in seeds} for f in FIGURES}
    kind_sums = {k: [sum(r["kind_counts"].get(k, 0) for r in per_seed[s]) for s in seeds] for k in kinds}
    return {
        "per_seed": per_seed,
        "per_round": [{f: _stat([per_seed[s][r][f] for s in seeds]) for f in FIGURES} for r in range(rounds)],
        "round_mean": {f: _stat(list(v.values())) for f, v in round_mean.items()},
        "round_mean_per_seed": round_mean,
        "total": {f: _stat([_over_rounds(per_seed[s], f, True) for s in seeds]) for f in COUNTS},
        "kind_total": {k: _stat([float(v) for v in sums]) for k, sums in kind_sums.items()},
    }


def _against(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Per figure: the strategy's round mean minus the reference's on the same seed, mean and sd over seeds."""
    out = {}
    for figure, values in row["round_mean_per_seed"].items():
        ref = base["round_mean_per_seed"][figure]
        pairs = [(v, ref.get(s)) for s, v in values.items()]
        out[figure] = _stat([None if v is None or b is None else v - b for v, b in pairs])
    return out


def picks_table(
    root: Path, facts: dict[str, Pair], strategies: list[str], seeds: list[int], rounds: int
) -> dict[str, Any]:
    """The `picks` part of active_learning/summary.json, read from the rounds' selection.json files."""
    selected = {s: {seed: seed_rounds(root, facts, s, seed, rounds) for seed in seeds} for s in strategies}
    return summarize_picks(selected, sorted({pair.kind for pair in facts.values()}))


def summarize_picks(selected: dict[str, dict[int, list[dict[str, Any]]]], kinds: list[str]) -> dict[str, Any]:
    """strategy -> seed -> round_picks of its rounds: every strategy's figures, random's difference beside."""
    table = {strategy: strategy_picks(per_seed, kinds) for strategy, per_seed in selected.items()}
    if REFERENCE in table:
        for strategy, row in table.items():
            if strategy != REFERENCE:
                row["against_random"] = _against(row, table[REFERENCE])
    rounds = len(next(iter(next(iter(selected.values()), {}).values()), []))
    return {"reference": REFERENCE if REFERENCE in table else None, "rounds": rounds, "strategies": table}
