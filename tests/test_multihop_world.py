"""The synthetic multi-hop world: deterministic, held-out questions disjoint from training ones, answers that need
both searches, demonstrations whose environment text is exactly what the real search environment and the tag
format produce, the verifier's exact match / F1 with aliases by hand, and SFT that trains the policy's turns only."""

from __future__ import annotations

import pytest
from support.models import chat_tokenizer

from prefpipe.base.sft import IGNORE, encode_demonstrations
from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.data.synthetic_multihop import (
    ADJECTIVES,
    FIRST_NAMES,
    NOUNS,
    SURNAMES,
    multihop_world,
    result_text,
)
from prefpipe.data.verifier import score
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.rollout.episodes.format import CALL, TagFormat
from prefpipe.grpo.rollout.episodes.measures import support_recall, supporting_titles
from prefpipe.settings.pipeline import load_config

SEARCH = {"type": "search", "corpus": "row", "top_k": 1, "k1": 1.5, "b": 0.75}


@pytest.fixture(scope="module")
def world():
    return multihop_world(seed=3, train=40, heldout=20, demonstrations=30, distractors=2, shortcut_rate=0.0)


def test_the_world_is_deterministic_and_seeded(world):
    assert multihop_world(3, 40, 20, 30, 2, 0.0) == world
    assert multihop_world(4, 40, 20, 30, 2, 0.0)[1] != world[1]
    train, held, demos = world
    assert (len(train), len(held), len(demos)) == (40, 20, 30)


def _entities(rows: list[dict]) -> tuple[set[str], set[str]]:
    """(companies, persons) the rows' supporting paragraphs name: a paragraph's subject and the name ending it."""
    companies, persons = set(), set()
    for r in rows:
        for p in r["paragraphs"]:
            if p["is_supporting"]:
                text = p["text"].removesuffix(".")
                (companies if "founded by" in text else persons).add(text.split(", ")[0])
                persons.add(" ".join(text.split()[-2:]))
    return companies, persons


def test_heldout_questions_share_no_entity_with_training_or_demonstrations(world):
    train, held, demos = world
    held_companies, held_persons = _entities(held)
    train_companies, train_persons = _entities(train)
    assert held_companies and held_persons
    assert not held_companies & train_companies and not held_persons & train_persons
    demo_text = " ".join(d["response"] for d in demos)
    assert not [name for name in held_companies | held_persons if name in demo_text]
    assert not {r["prompt"] for r in held} & {r["prompt"] for r in train}
    for row in held + train:
        assert row["answer"] not in row["prompt"] and len(supporting_titles(row)) == 2
        assert row["kind"] == "exact_match" and row["aliases"] == []
        assert row["answer"] in held_persons | train_persons


def test_every_name_word_is_one_token_and_tokenises_alike_wherever_it_appears(world):
    """The scratch tokenizer (the default vocabulary size) trained on the demonstrations: every name word is one
    token, a name's tokens in a result are its tokens in the question, a call and an answer (copying is
    copying tokens), and every demonstration fits the default SFT length."""
    _, held, demos = multihop_world(0, 0, 50, 2000, 2, 0.0)
    base = load_config()["base"]
    tok = train_tokenizer(
        [d["prompt"] for d in demos] + [d["response"] for d in demos], base["tokenizer"]["vocab_size"], 256
    )
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for first in (*ADJECTIVES, *FIRST_NAMES):
        assert len(ids(first + " ")) == 1, first
    for last in (*NOUNS, *SURNAMES):
        assert len(ids(last)) == 1, last
    for row in held[:20]:
        company = row["prompt"].removesuffix("?").split(" of ")[-1].split(" founded ")[-1]
        name = ids(company)
        assert len(name) == 2
        assert _contains(ids(row["prompt"]), name) and _contains(ids(f"<search>{company}</search>"), name)
        assert _contains(ids(result_text(row["paragraphs"][0])), ids(row["paragraphs"][0]["title"]))
        assert _contains(ids(f"<answer>{row['answer']}</answer>"), ids(row["answer"]))
    data = encode_demonstrations(tok, demos, base["sft"]["max_length"])
    assert len(data.examples) == len(demos) and not data.skipped


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def test_demonstrations_replay_exactly_through_the_real_environment(world):
    """Running each demonstration's calls through search (top 1, the row's paragraphs) and the tag format gives
    its environment turns byte for byte, and the two searches retrieve both supporting paragraphs (a founder's
    own paragraph outranks the company's, which also names them)."""
    fmt = TagFormat()
    train, held, demos = world
    for demo in demos:
        runner = EnvironmentRunner(build_environment(SEARCH), max_result_chars=400)
        # a demonstration carries its turns only: its corpus is the paragraphs its results show
        paragraphs = [
            {"title": t["text"].split("] ", 1)[1].split(": ", 1)[0], "text": t["text"].split(": ", 1)[1][: -len("</result>\n")]}
            for t in demo["turns"] if t["owner"] == "environment"
        ]  # fmt: skip
        runner.reset({"paragraphs": paragraphs})
        for policy, env in zip(demo["turns"][0::2], demo["turns"][1::2], strict=False):
            end = fmt.turn_end(policy["text"], at_eos=False)
            assert end.kind == CALL
            assert fmt.render(runner.run(end.call)) == env["text"]
        assert demo["response"] == "".join(t["text"] for t in demo["turns"])
    # on the RL rows' own corpora (with distractors): the perfect searcher's two queries find both supports
    for row in train + held:
        runner = EnvironmentRunner(build_environment(SEARCH), max_result_chars=400)
        runner.reset(row)
        company = row["prompt"].removesuffix("?").split(" of ")[-1].split(" founded ")[-1]
        first = runner.run(fmt.turn_end(f"<search>{company}</search>", False).call).text
        assert first.startswith(f"[1] {company}: ")
        founder = first.removesuffix(".").split(", founded by ")[-1]
        second = runner.run(fmt.turn_end(f"<search>{founder}</search>", False).call).text
        assert second == f"[1] {founder}: {founder}, whose mentor was {row['answer']}."
        assert support_recall(supporting_titles(row), runner.environment.retrieved) == 1.0


def test_exact_match_and_f1_with_aliases_by_hand():
    answer, aliases = "Karu Rivoma", ["Rivoma"]
    assert score("exact_match", answer, "karu  rivoma.", aliases) == 1.0  # SQuAD normalisation
    assert score("exact_match", answer, "Rivoma", aliases) == 1.0  # the alias
    assert score("exact_match", answer, "Karu", aliases) == 0.0
    # F1 of "Karu Dapo" vs "Karu Rivoma": 1 shared token, P = 1/2, R = 1/2 -> 0.5; vs the alias: 0
    assert score("token_f1", answer, "Karu Dapo", aliases) == pytest.approx(0.5)
    # "Rivoma Dapo" vs alias "Rivoma": P = 1/2, R = 1 -> 2/3; vs the answer: P = 1/2, R = 1/2 -> 1/2; best 2/3
    assert score("token_f1", answer, "Rivoma Dapo", aliases) == pytest.approx(2 / 3)


def test_sft_trains_the_policy_turns_and_not_the_environment_text(world):
    tok = chat_tokenizer()
    demo = world[2][0]
    data = encode_demonstrations(tok, [demo], max_length=10_000)
    ids, labels = data.examples[0]
    pieces = [(t["owner"], tok(t["text"], add_special_tokens=False)["input_ids"]) for t in demo["turns"]]
    tail = [tok_id for _, part in pieces for tok_id in part] + tok(tok.eos_token, add_special_tokens=False)[
        "input_ids"
    ]
    assert ids[-len(tail) :] == tail  # turn by turn, as the rollout builds an episode
    want = [x for owner, part in pieces for x in (part if owner == "policy" else [IGNORE] * len(part))]
    want += tok(tok.eos_token, add_special_tokens=False)["input_ids"]
    assert labels[-len(tail) :] == want
    assert all(label == IGNORE for label in labels[: len(ids) - len(tail)])  # the prompt


def test_shortcut_demonstrations_answer_the_founder_after_one_search():
    """shortcut_rate: that share of the demonstrations (exactly, seeded) search once and answer the founder the
    result names; the others search twice; the questions are the same as without shortcuts."""
    _, held, demos = multihop_world(3, 0, 4, 40, 2, 0.25)
    assert sum(d["shortcut"] for d in demos) == 10
    for d in demos:
        founder = d["turns"][1]["text"].removesuffix(".</result>\n").split(" by ")[-1]
        if d["shortcut"]:
            assert [t["owner"] for t in d["turns"]] == ["policy", "environment", "policy"]
            assert d["turns"][-1]["text"] == f"<answer>{founder}</answer>"
        else:
            assert len(d["turns"]) == 5 and d["turns"][2]["text"] == f"<search>{founder}</search>"
    plain = multihop_world(3, 0, 4, 40, 2, 0.0)
    assert plain[1] == held
    assert [d["prompt"] for d in plain[2]] == [d["prompt"] for d in demos]
