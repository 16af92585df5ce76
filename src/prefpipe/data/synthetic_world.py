"""Assemble the synthetic world: SFT demonstrations, RewardBench-style pairs, cyclic triples and RL prompts.

Determinism: every part draws from its own `random.Random` seeded with a string "<seed>:<part>" (string seeds
are hashed with SHA-512 by `random`, independent of PYTHONHASHSEED), so the same seed gives the same rows and
changing one count does not reshuffle unrelated parts.
Leakage: held-out RL prompts are drawn first and their exact prompt texts are excluded from demonstrations, RL
train prompts and every preference pair. Arithmetic facts (e.g. 3 + 4) recur under other phrasings; word tasks
are new word combinations. Train and test pairs never share an identical (prompt, chosen, rejected) row.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefpipe.common.config import ConfigError
from prefpipe.data import (
    synthetic_chat,
    synthetic_cyclic,
    synthetic_reasoning,
    synthetic_safety,
    synthetic_tradeoff,
)
from prefpipe.data.synthetic_noise import apply_switches
from prefpipe.data.synthetic_tasks import Task, habitual_miss, near_misses, sample_task
from prefpipe.settings.data import SyntheticWorldSettings

PairMaker = Callable[[random.Random], tuple[str, str, str]]
CYCLIC_SUBSET = "cyclic-rps"
TRADEOFF_SUBSET = "chathard-tradeoff"
_MAX_TRIES_PER_ROW = 200


@dataclass
class World:
    """All rows of one generated world, keyed like the files prep_data writes."""

    demonstrations: list[dict] = field(default_factory=list)
    pairs_train: list[dict] = field(default_factory=list)
    pairs_test: list[dict] = field(default_factory=list)
    rl_prompts_train: list[dict] = field(default_factory=list)
    rl_prompts_heldout: list[dict] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def _any_split(make: PairMaker) -> Callable[[str], PairMaker]:
    return lambda split: make


# Subset name -> the pair maker of a split (train/test). Names are what config `data.sections` refers to.
PAIR_MAKERS: dict[str, Callable[[str], PairMaker]] = {
    "chat-arith": _any_split(synthetic_chat.chat_arith),
    "chat-instruct": _any_split(synthetic_chat.chat_instruct),
    "chathard-arith": _any_split(synthetic_chat.chathard_arith),
    "chathard-instruct": _any_split(synthetic_chat.chathard_instruct),
    "safety-refuse": synthetic_safety.refuse_pair,
    "safety-comply": synthetic_safety.comply_pair,
    "safety-consent": synthetic_safety.consent_pair,
    "reasoning-multistep": _any_split(synthetic_reasoning.reasoning_pair),
}
SUBSETS = (*PAIR_MAKERS, TRADEOFF_SUBSET, CYCLIC_SUBSET)


def _rng(seed: int, part: str) -> random.Random:
    return random.Random(f"{seed}:{part}")


def _draw_tasks(
    kinds: tuple[str, ...], n: int, rng: random.Random, excluded: set[str], unique: bool, key: str
) -> list[Task]:
    """`n` tasks, kinds round-robin (balanced counts), skipping excluded prompts (and repeats if `unique`)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for i in range(n):
        kind = kinds[i % len(kinds)]
        for _ in range(_MAX_TRIES_PER_ROW):
            task = sample_task(kind, rng)
            if task.prompt not in excluded and not (unique and task.prompt in seen):
                break
        else:
            raise ConfigError(f"data.synthetic.{key}={n}: ran out of distinct {kind!r} prompts; lower it")
        seen.add(task.prompt)
        tasks.append(task)
    return tasks


def _draw_pairs(
    make: PairMaker,
    n: int,
    rng: random.Random,
    excluded_prompts: set[str],
    taken: set[tuple[str, str, str]],
    subset: str,
    key: str,
) -> list[tuple[str, str, str]]:
    """`n` distinct pairs not in `taken` (updated in place) whose prompt is not excluded."""
    rows: list[tuple[str, str, str]] = []
    for _ in range(n):
        for _ in range(_MAX_TRIES_PER_ROW):
            row = make(rng)
            if row not in taken and row[0] not in excluded_prompts:
                break
        else:
            raise ConfigError(
                f"data.synthetic.{key}={n}: subset {subset!r} ran out of distinct pairs; lower it"
            )
        if row[1] == row[2]:
            raise AssertionError(f"subset {subset!r} made chosen == rejected for prompt {row[0]!r}")
        taken.add(row)
        rows.append(row)
    return rows


def _pair_dict(pair_id: str, row: tuple[str, str, str], subset: str) -> dict:
    return {"id": pair_id, "prompt": row[0], "chosen": row[1], "rejected": row[2], "subset": subset}


def _rl_dict(pair_id: str, task: Task) -> dict:
    return {"id": pair_id, "prompt": task.prompt, "answer": task.answer, "kind": task.kind}


def _habitual(settings: SyntheticWorldSettings, seed: int, tasks: list[Task]) -> set[int]:
    """Indices of the demonstrations that get the habitual mistake: an exact share of each habit kind's (a habit
    kind that `kinds` leaves out has no demonstrations, so narrowing `kinds` needs no change here)."""
    rng = _rng(seed, "demonstrations:habits")
    out: set[int] = set()
    for kind in settings.demo_habit_kinds:
        of_kind = [i for i, t in enumerate(tasks) if t.kind == kind]
        out.update(rng.sample(of_kind, round(len(of_kind) * settings.demo_habit_rate)))
    return out


def _demonstrations(
    settings: SyntheticWorldSettings, seed: int, kinds: tuple[str, ...], excluded: set[str]
) -> tuple[list[dict], dict[str, int]]:
    """Demonstrations from an imperfect demonstrator: an exact share of answers are random near misses, and on
    the habit kinds (`demo_habit_kinds`) an exact share `demo_habit_rate` is its one habitual mistake instead."""
    n, rate = settings.demonstrations, settings.demo_error_rate
    rng = _rng(seed, "demonstrations")
    tasks = _draw_tasks(kinds, n, rng, excluded, unique=False, key="demonstrations")
    wrong = set(rng.sample(range(n), round(n * rate)))
    habitual = _habitual(settings, seed, tasks)
    habit_kinds = set(settings.demo_habit_kinds)
    rows = []
    counts = {"wrong": 0, "habitual": len(habitual)}
    for i, task in enumerate(tasks):
        if task.kind in habit_kinds:
            response = habitual_miss(task) if i in habitual else task.answer
        else:
            near_miss = rng.choice(near_misses(task)) if i in wrong else None
            response = task.answer if near_miss is None else near_miss
        counts["wrong"] += response != task.answer
        rows.append({"id": f"demo-{i:06d}", "prompt": task.prompt, "response": response, "kind": task.kind})
    return rows, counts


def _pairs(settings: SyntheticWorldSettings, seed: int, excluded: set[str]) -> tuple[list[dict], list[dict]]:
    train: list[dict] = []
    test: list[dict] = []
    for subset, make in PAIR_MAKERS.items():
        taken: set[tuple[str, str, str]] = set()
        for split, rows_out, key in (
            ("train", train, "pairs_per_subset_train"),
            ("test", test, "pairs_per_subset_test"),
        ):
            rows = _draw_pairs(
                make(split),
                getattr(settings, key),
                _rng(seed, f"pairs:{subset}:{split}"),
                excluded,
                taken,
                subset,
                key,
            )
            rows_out.extend(_pair_dict(f"{subset}-{split}-{i:05d}", r, subset) for i, r in enumerate(rows))
    # Whole triples, at least one, so the subset always exists; 1.5x a subset's pairs (the intransitive
    # part of Chat Hard is where GPM and BT differ, and 33 test triples left the section's difference inside the
    # 95% intervals on some seeds).
    tradeoff = synthetic_tradeoff.split_keys(
        max(1, settings.pairs_per_subset_train // 2),
        max(1, settings.pairs_per_subset_test // 2),
        _rng(seed, "tradeoff"),
        "pairs_per_subset_train/test",
    )
    cyclic = synthetic_cyclic.split_combinations(
        settings.cyclic_triples_train, settings.cyclic_triples_test, _rng(seed, "cyclic")
    )
    for subset, (combos_train, combos_test), rows_of in (
        (TRADEOFF_SUBSET, tradeoff, synthetic_tradeoff.triple_rows),
        (CYCLIC_SUBSET, cyclic, synthetic_cyclic.triple_rows),
    ):
        for split, combos, rows_out in (("train", combos_train, train), ("test", combos_test, test)):
            for t, combo in enumerate(combos):
                for edge, row in enumerate(rows_of(combo)):
                    rows_out.append(_pair_dict(f"{subset}-{split}-{t:05d}-{edge}", row, subset))
    return train, test


WORLD_PARTS = frozenset({"pairs", "demonstrations", "rl_prompts"})


def build_world(settings: SyntheticWorldSettings, seed: int, parts: frozenset[str] = WORLD_PARTS) -> World:
    """Generate the asked `parts` of the world (pairs, demonstrations, rl_prompts) from `data.synthetic`.

    The held-out RL prompts are always drawn (cheap), since every other part excludes their texts: a part's rows
    are the same bytes whichever other parts are asked for."""
    unknown = set(parts) - WORLD_PARTS
    if unknown:
        raise ValueError(f"build_world: unknown parts {sorted(unknown)}; known: {sorted(WORLD_PARTS)}")
    kinds = tuple(settings.kinds)
    heldout = _draw_tasks(
        kinds,
        settings.rl_prompts_heldout,
        _rng(seed, "rl:heldout"),
        set(),
        unique=True,
        key="rl_prompts_heldout",
    )
    excluded = {t.prompt for t in heldout}
    world = World()
    if "rl_prompts" in parts:
        rl_train = _draw_tasks(
            kinds,
            settings.rl_prompts_train,
            _rng(seed, "rl:train"),
            excluded,
            unique=True,
            key="rl_prompts_train",
        )
        world.rl_prompts_train = [_rl_dict(f"rl-train-{i:05d}", t) for i, t in enumerate(rl_train)]
        world.rl_prompts_heldout = [_rl_dict(f"rl-heldout-{i:05d}", t) for i, t in enumerate(heldout)]
    demo_counts = {"wrong": 0, "habitual": 0}
    if "demonstrations" in parts:
        world.demonstrations, demo_counts = _demonstrations(settings, seed, kinds, excluded)
    uncertainty = None
    if "pairs" in parts:
        train, test = _pairs(settings, seed, excluded)
        world.pairs_train, world.pairs_test, uncertainty = apply_switches(
            train, test, settings.label_noise, settings.unfamiliar_subsets, seed, SUBSETS
        )
    world.stats = {
        "demonstrations_wrong": demo_counts["wrong"],
        "demonstrations_habitual": demo_counts["habitual"],
        "demonstrations_per_kind": dict(Counter(r["kind"] for r in world.demonstrations)),
        "rl_prompts_train_per_kind": dict(Counter(r["kind"] for r in world.rl_prompts_train)),
        "rl_prompts_heldout_per_kind": dict(Counter(r["kind"] for r in world.rl_prompts_heldout)),
        "pairs_train_per_subset": dict(Counter(r["subset"] for r in world.pairs_train)),
        "pairs_test_per_subset": dict(Counter(r["subset"] for r in world.pairs_test)),
    }
    if uncertainty is not None:  # only with a switch on (data.synthetic.label_noise, unfamiliar_subsets)
        world.stats["uncertainty"] = uncertainty
    return world
