"""The synthetic world through the prep_data stage: determinism, counts, leakage and correctness of labels.

Answers are re-derived here from the prompt text with an independent parser, never taken from the generator.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import operator
import re
from collections import Counter
from pathlib import Path

import pytest
from support.settings import data_settings, stage_json
from support.stages import run_main

from prefpipe import prep_data
from prefpipe.common.config import ConfigError
from prefpipe.data import synthetic_safety
from prefpipe.data.synthetic_world import build_world
from prefpipe.settings.build import to_mapping
from prefpipe.settings.data import DataSettings
from prefpipe.settings.pipeline import load_stage

FILES = ("pairs_train", "pairs_test", "demonstrations", "rl_prompts_train", "rl_prompts_heldout")
SECTIONS = {
    "chat": ["chat-arith", "chat-instruct"],
    "chat_hard": ["chathard-arith", "chathard-instruct", "chathard-tradeoff"],
    "safety": ["safety-refuse", "safety-comply", "safety-consent"],
    "reasoning": ["reasoning-multistep"],
}
SYNTH = {
    "pairs_per_subset_train": 30,
    "pairs_per_subset_test": 10,
    "cyclic_triples_train": 10,
    "cyclic_triples_test": 4,
    "demonstrations": 240,
    "rl_prompts_train": 48,
    "rl_prompts_heldout": 24,
    "demo_error_rate": 0.25,
    "demo_habit_kinds": [],
    "demo_habit_rate": 0.6,
    "kinds": ["add", "sub", "count", "upper", "repeat", "sort", "first", "last"],
}
OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def stage_settings(seed: int = 3, **replaced) -> DataSettings:
    """The data stage's settings: the default `data` with SYNTH, experiment "test"; `replaced` keys are
    replaced whole (dataclasses.replace, so a `sections` mapping is not merged into the default one)."""
    settings = data_settings({"synthetic": SYNTH}, experiment="test", seed=seed)
    return dataclasses.replace(settings, **replaced)


def run_stage(out: Path, caplog=None, seed: int = 3, **replaced) -> Path:
    """Run prep_data into `out` (asserting exit 0); with caplog, return its exit code and error lines."""
    code, errors = run_main(prep_data.main, stage_json(stage_settings(seed, **replaced)), caplog, out=out)
    if caplog is not None:
        return code, errors
    assert code == 0, errors
    return out


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_stage(tmp_path_factory.mktemp("world"))


def rows(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]


def independent_answer(kind: str, prompt: str) -> str:
    """Solve a task from its prompt text alone."""
    if kind in ("add", "sub"):
        if m := re.search(r"(\d+) ([+-]) (\d+)", prompt):
            a, op, b = int(m[1]), m[2], int(m[3])
        elif m := re.fullmatch(r"Add (\d+) and (\d+)\.", prompt):
            a, op, b = int(m[1]), "+", int(m[2])
        elif m := re.fullmatch(r"Subtract (\d+) from (\d+)\.", prompt):
            a, op, b = int(m[2]), "-", int(m[1])
        else:
            raise AssertionError(f"cannot parse {prompt!r}")
        return str(OPS[op](a, b))
    words = prompt.split(": ", 1)[1].rstrip("?").split()
    return {
        "count": str(len(words)),
        "upper": " ".join(w.upper() for w in words),
        "repeat": " ".join(words),
        "sort": " ".join(sorted(words)),
        "first": words[0],
        "last": words[-1],
    }[kind]


def test_same_seed_same_bytes_other_seed_differs(world_dir: Path, tmp_path: Path) -> None:
    again = run_stage(tmp_path / "again")
    other = run_stage(tmp_path / "other", seed=4)
    for name in FILES:
        first = (world_dir / f"{name}.jsonl").read_bytes()
        assert first == (again / f"{name}.jsonl").read_bytes(), name
        assert first != (other / f"{name}.jsonl").read_bytes(), name


def test_counts_per_subset_and_summary(world_dir: Path) -> None:
    summary = json.loads((world_dir / "summary.json").read_text())
    for split, key in (("train", "pairs_per_subset_train"), ("test", "pairs_per_subset_test")):
        counts = Counter(r["subset"] for r in rows(world_dir, f"pairs_{split}"))
        expected = {s: SYNTH[key] for names in SECTIONS.values() for s in names}
        expected["chathard-tradeoff"] = 3 * max(1, SYNTH[key] // 2)  # whole triples
        expected["cyclic-rps"] = 3 * SYNTH[f"cyclic_triples_{split}"]
        assert counts == expected
        assert summary["subsets"][split] == expected
    for name, key in (
        ("demonstrations", "demonstrations"),
        ("rl_prompts_train", "rl_prompts_train"),
        ("rl_prompts_heldout", "rl_prompts_heldout"),
    ):
        assert len(rows(world_dir, name)) == SYNTH[key] == summary["files"][f"{name}.jsonl"]
    assert summary["sections"] == SECTIONS
    assert summary["cyclic_subsets"] == ["cyclic-rps"]
    assert (world_dir / "config.json").exists() and (world_dir / "versions.json").exists()


def test_pairs_schema_distinct_and_unique(world_dir: Path) -> None:
    train, test = rows(world_dir, "pairs_train"), rows(world_dir, "pairs_test")
    for row in train + test:
        assert set(row) == {"id", "prompt", "chosen", "rejected", "subset"}
        assert all(isinstance(v, str) and v for v in row.values())
        assert row["chosen"] != row["rejected"]
    triples = [(r["prompt"], r["chosen"], r["rejected"]) for r in train + test]
    assert len(set(triples)) == len(triples), "identical pair rows (also across train/test)"
    ids = [r["id"] for name in FILES for r in rows(world_dir, name)]
    assert len(set(ids)) == len(ids)


def test_heldout_prompts_appear_nowhere_else(world_dir: Path) -> None:
    heldout = {r["prompt"] for r in rows(world_dir, "rl_prompts_heldout")}
    assert len(heldout) == SYNTH["rl_prompts_heldout"]
    elsewhere = {
        r["prompt"]
        for name in ("demonstrations", "rl_prompts_train", "pairs_train", "pairs_test")
        for r in rows(world_dir, name)
    }
    assert not heldout & elsewhere


def test_rl_answers_are_ground_truth(world_dir: Path) -> None:
    for name in ("rl_prompts_train", "rl_prompts_heldout"):
        for row in rows(world_dir, name):
            assert row["kind"] == infer_kind(row["prompt"])
            assert row["answer"] == independent_answer(row["kind"], row["prompt"]), row
        assert Counter(r["kind"] for r in rows(world_dir, name)).keys() == set(SYNTH["kinds"])


def test_demonstrator_error_rate_is_exact_and_errors_are_near_misses(world_dir: Path) -> None:
    demos = rows(world_dir, "demonstrations")
    wrong = [d for d in demos if d["response"] != independent_answer(d["kind"], d["prompt"])]
    assert len(wrong) == round(SYNTH["demo_error_rate"] * len(demos))
    for d in wrong:
        truth = independent_answer(d["kind"], d["prompt"])
        if d["kind"] in ("add", "sub", "count"):
            assert d["response"].isdigit() and 1 <= abs(int(d["response"]) - int(truth)) <= 2
        else:  # a near miss uses the prompt's words (case aside)
            prompt_words = set(d["prompt"].split(": ", 1)[1].rstrip("?").lower().split())
            assert set(d["response"].lower().split()) <= prompt_words, d


def independent_habit(kind: str, prompt: str) -> str:
    """The demonstrator's habitual mistake re-derived from the prompt text (an off-by-one of each kind)."""
    truth = independent_answer(kind, prompt)
    if kind in ("add", "sub", "count"):
        return str(int(truth) + 1)
    words = prompt.split(": ", 1)[1].rstrip("?").split()
    if kind in ("first", "last"):
        return words[1] if kind == "first" else words[-2]
    if kind == "upper":
        return " ".join([w.upper() for w in words[:-1]] + [words[-1]])
    if kind == "sort" and words != sorted(words):
        return " ".join(words)
    ordered = words if kind == "repeat" else sorted(words)
    return " ".join(ordered[:-2] + ordered[-2:][::-1])


def test_demonstrator_habit_is_an_exact_share_of_one_mistake_per_kind() -> None:
    habits = ["add", "count", "upper", "repeat", "sort", "first", "last"]
    synthetic = dataclasses.replace(
        stage_settings().synthetic, demonstrations=800, demo_habit_kinds=habits, demo_habit_rate=0.6
    )
    world = build_world(synthetic, 0, frozenset({"demonstrations"}))
    by_kind: dict[str, list[dict]] = {}
    for d in world.demonstrations:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind, demos in by_kind.items():
        wrong = [d for d in demos if d["response"] != independent_answer(kind, d["prompt"])]
        if kind in habits:
            assert len(wrong) == round(0.6 * len(demos)), kind
            assert all(d["response"] == independent_habit(kind, d["prompt"]) for d in wrong), kind
        else:  # sub keeps random near misses (about demo_error_rate of them, not one habit)
            assert 0 < len(wrong) < 0.5 * len(demos)
    assert world.stats["demonstrations_habitual"] == sum(round(0.6 * len(by_kind[k])) for k in habits)
    narrowed = build_world(
        dataclasses.replace(synthetic, kinds=["add", "sub"]), 0, frozenset({"demonstrations"})
    )
    assert narrowed.stats["demonstrations_habitual"] == round(0.6 * 400)  # only add has a habit there


def infer_kind(prompt: str) -> str:
    """Task kind from the wording of a prompt (independent of the generator's bookkeeping)."""
    if re.search(r"\d", prompt):
        return "sub" if ("-" in prompt or prompt.startswith("Subtract")) else "add"
    for kind, cues in {
        "count": ("How many", "Count"),
        "upper": ("Uppercase", "capital"),
        "repeat": ("Repeat", "Say exactly"),
        "sort": ("Sort", "alphabetical"),
        "first": ("First", "first"),
        "last": ("Last", "last"),
    }.items():
        if any(cue in prompt for cue in cues):
            return kind
    raise AssertionError(f"unknown task prompt {prompt!r}")


def _answer_at_first_difference(chosen: str, rejected: str, answer: str) -> bool:
    """The first character where two same-phrasing replies differ lies inside an occurrence of `answer`."""
    first = next(i for i, (a, b) in enumerate(zip(chosen, rejected, strict=False)) if a != b)
    return any(m.start() <= first < m.end() for m in re.finditer(re.escape(answer), chosen))


def test_chat_subsets_contrast_as_designed(world_dir: Path) -> None:
    refusals = set(synthetic_safety.REFUSALS) | set(synthetic_safety.MORALISING)
    for row in rows(world_dir, "pairs_train") + rows(world_dir, "pairs_test"):
        subset, chosen, rejected = row["subset"], row["chosen"], row["rejected"]
        if subset.startswith(("chat-", "chathard-")) and subset != "chathard-tradeoff":
            answer = independent_answer(infer_kind(row["prompt"]), row["prompt"])
            assert re.search(rf"(?<![\w]){re.escape(answer)}(?![\w])", chosen), row
            assert min(len(chosen), len(rejected)) >= 10, row  # fluent replies, not bare answers
        if subset.startswith("chathard-") and subset != "chathard-tradeoff":
            assert len(rejected) == len(chosen), row  # same phrasing and length, one detail differs
            assert _answer_at_first_difference(chosen, rejected, answer), row
        if subset == "safety-refuse":
            assert chosen in synthetic_safety.REFUSALS and rejected not in refusals, row
        if subset in ("safety-comply", "safety-consent"):
            assert rejected in refusals and chosen not in refusals, row
        # permission is what turns someone else's thing into a harmless request, and only consent asks with it
        asked_with_permission = row["prompt"].startswith(synthetic_safety.PERMISSION)
        assert asked_with_permission == (subset == "safety-consent"), row
        if row["prompt"].startswith(synthetic_safety.NO_PERMISSION):
            assert subset == "safety-refuse", row


def _safety_combinations(world_dir: Path, split: str) -> dict[str, set[tuple[str, str]]]:
    """subset -> the (owner, object) combinations its prompts ask about (owners matched longest first, so
    "my" never shadows "my own")."""
    owners = sorted(synthetic_safety.HARMFUL_OWNERS + synthetic_safety.HARMLESS_OWNERS, key=len, reverse=True)
    pattern = re.compile(
        rf"({'|'.join(map(re.escape, owners))}) ({'|'.join(map(re.escape, synthetic_safety.OBJECTS))})\b"
    )
    found: dict[str, set[tuple[str, str]]] = {}
    for row in rows(world_dir, f"pairs_{split}"):
        if row["subset"].startswith("safety-"):
            match = pattern.search(row["prompt"])
            assert match, row
            found.setdefault(row["subset"], set()).add((match[1], match[2]))
    return found


def test_safety_owner_decides_and_held_out_combinations_appear_only_in_test(world_dir: Path) -> None:
    train, test = _safety_combinations(world_dir, "train"), _safety_combinations(world_dir, "test")
    for subset, owners in (
        ("safety-refuse", synthetic_safety.HARMFUL_OWNERS),
        ("safety-comply", synthetic_safety.HARMLESS_OWNERS),
        ("safety-consent", synthetic_safety.HARMFUL_OWNERS),
    ):
        assert {o for o, _ in train[subset] | test[subset]} <= set(owners), subset
        assert test[subset] and not (test[subset] & train[subset]), subset
        # every word of a test request was seen in training: only its combination is new
        assert {o for o, _ in test[subset]} <= {o for o, _ in train[subset]}, subset
        assert {b for _, b in test[subset]} <= {b for _, b in train[subset]}, subset


def test_safety_plain_compliance_is_chosen_in_one_subset_and_rejected_in_the_other(world_dir: Path) -> None:
    """The same reply form wins or loses by whose thing it is: no reply-only rule can score both subsets."""
    plain = [
        re.escape(form).replace(r"\{x\}", ".+").replace(r"\{step\}", ".+") for form in synthetic_safety.COMPLY
    ]
    is_plain = re.compile("|".join(f"^{p}$" for p in plain))
    rows_all = rows(world_dir, "pairs_train")
    assert any(r["subset"] == "safety-refuse" and is_plain.match(r["rejected"]) for r in rows_all)
    assert any(r["subset"] == "safety-comply" and is_plain.match(r["chosen"]) for r in rows_all)


def test_tradeoff_triples_are_majority_cycles(world_dir: Path) -> None:
    for split in ("train", "test"):
        triples: dict[str, list[tuple[str, str]]] = {}
        for row in rows(world_dir, f"pairs_{split}"):
            if row["subset"] == "chathard-tradeoff":
                triples.setdefault(row["id"].rsplit("-", 1)[0], []).append((row["chosen"], row["rejected"]))
        assert triples
        for edges in triples.values():
            assert len(edges) == 3
            wins = Counter(c for c, _ in edges)
            losses = Counter(r for _, r in edges)
            assert set(wins.values()) == {1} and set(losses.values()) == {1}, edges  # a 3-cycle


def _steps(chain: str) -> tuple[list[tuple[int, int, bool]], int]:
    """Each 'a op b = c.' step of a chain: (start, result, arithmetic right), and the final answer."""
    steps = re.findall(r"(-?\d+) ([+*-]) (\d+) = (-?\d+)\.", chain)
    final = int(re.search(r"Answer: (-?\d+)$", chain)[1])
    return [(int(a), int(c), OPS[op](int(a), int(b)) == int(c)) for a, op, b, c in steps], final


def _flaws(chain: str) -> int:
    """Independent count of flaws: wrong step arithmetic, a step not starting from the previous result, a
    final answer that is not the last result."""
    steps, final = _steps(chain)
    slips = sum(not right for _, _, right in steps)
    carries = sum(steps[i][0] != steps[i - 1][1] for i in range(1, len(steps)))
    return slips + carries + (final != steps[-1][1])


def test_reasoning_rejected_has_exactly_one_flaw(world_dir: Path) -> None:
    for row in rows(world_dir, "pairs_train") + rows(world_dir, "pairs_test"):
        if row["subset"] != "reasoning-multistep":
            continue
        assert _flaws(row["chosen"]) == 0 and len(_steps(row["chosen"])[0]) in (2, 3), row
        assert _flaws(row["rejected"]) == 1 and len(_steps(row["rejected"])[0]) == len(
            _steps(row["chosen"])[0]
        )
        assert _steps(row["chosen"])[1] != _steps(row["rejected"])[1]


def test_section_mapping_errors_name_the_problem(tmp_path: Path, caplog) -> None:
    bad = copy.deepcopy(SECTIONS)
    bad["chat"] = ["chat-arith", "chat-typo"]
    code, errors = run_stage(tmp_path / "a", caplog, sections=bad)
    assert code == 2 and len(errors) == 1 and "chat-typo" in errors[0]
    missing = copy.deepcopy(SECTIONS)
    missing["reasoning"] = []
    code, errors = run_stage(tmp_path / "b", caplog, sections=missing)
    assert code == 2 and len(errors) == 1 and "reasoning-multistep" in errors[0]
    assert not (tmp_path / "b" / "pairs_train.jsonl").exists()  # checked before anything is written


def test_config_errors_name_the_key() -> None:
    stage = to_mapping(stage_settings())
    stage["synthetic"] = {k: v for k, v in SYNTH.items() if k != "demonstrations"}
    with pytest.raises(ConfigError, match=r"config\.synthetic: missing key\(s\) demonstrations"):
        load_stage(DataSettings, stage, "config")
    with pytest.raises(ConfigError, match=r"data\.synthetic\.demo_error_rate: 1\.5 is greater than"):
        data_settings({"synthetic": {"demo_error_rate": 1.5}})
    with pytest.raises(ConfigError, match=r"data\.synthetic\.kinds\.1: 'poem' is not one of"):
        data_settings({"synthetic": {"kinds": ["add", "poem"]}})
    with pytest.raises(ConfigError, match=r"data\.synthetic\.cyclic_triples_train: 500 is greater than"):
        data_settings({"synthetic": {"cyclic_triples_train": 500}})
    too_many = dataclasses.replace(
        stage_settings().synthetic, cyclic_triples_train=150, cyclic_triples_test=100
    )
    with pytest.raises(ConfigError, match=r"cyclic_triples_train \+ cyclic_triples_test = 250 exceeds"):
        build_world(too_many, 0)


def test_external_source_replaces_only_the_pairs(tmp_path: Path) -> None:
    source = tmp_path / "pairs.jsonl"
    lines = [
        {
            "id": str(i),
            "prompt": f"q{i}",
            "chosen": f"good {i}",
            "rejected": f"bad {i}",
            "subset": "alpacaeval-easy",
        }
        for i in range(20)
    ]
    lines.append(
        {"id": "dup", "prompt": "q", "chosen": "same", "rejected": "same", "subset": "alpacaeval-easy"}
    )
    source.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    external = {
        "path": str(source),
        "split": "train",
        "format": "auto",
        "test_fraction": 0.2,
        "subset_name": "default",
    }
    out = run_stage(
        tmp_path / "ext",
        source="jsonl",
        external=dataclasses.replace(stage_settings().external, **external),
        sections={"chat": ["alpacaeval-easy"]},
        cyclic_subsets=[],
    )
    summary = json.loads((out / "summary.json").read_text())
    pairs = rows(out, "pairs_train") + rows(out, "pairs_test")
    assert {r["subset"] for r in pairs} == {"alpacaeval-easy"} and len(pairs) == 20
    assert summary["external"]["dropped"]["chosen_equals_rejected"] == 1
    assert len(rows(out, "rl_prompts_heldout")) == SYNTH["rl_prompts_heldout"]  # policy tasks stay synthetic
