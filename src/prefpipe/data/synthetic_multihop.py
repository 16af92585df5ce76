"""A synthetic multi-hop world for multi-turn GRPO: questions whose answer needs two searches over a tiny corpus.

Each question is about an invented company C, founded by an invented person F, who was mentored by an invented
person M (a company's name and a person's surname are three syllables, new to the world; first names may recur): "Who mentored the founder of C?" (answer M). The row's corpus holds one paragraph per entity,
C's ("C was founded by F.") and F's ("F was mentored by M."), both supporting, plus `distractors` paragraphs of
other rows' entities. Names are fresh syllable combinations, so the answer cannot be known without reading:
search C, read F in the result, search F, read M, answer. Held-out questions (drawn first) share no company,
founder or mentor with training rows or demonstrations.

Rows (the RL prompt files' shape, grpo/rollout/episodes): {id, prompt, answer, aliases (the mentor's surname),
kind: exact_match, paragraphs: [{title, text, is_supporting}], hops: 2}. Demonstrations add `turns`: the
policy's and the environment's texts in order ({owner, text}), the environment's written as the tag format
renders the search environment's top result (`<result>[1] title: text</result>` on its own line;
tests/test_multihop_world.py checks them against the real environment), and `response`, their concatenation.
Determinism: one `random.Random("<seed>:multihop")`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = (
    "ba",
    "da",
    "fe",
    "ga",
    "hi",
    "jo",
    "ka",
    "lu",
    "ma",
    "ne",
    "po",
    "ri",
    "sa",
    "tu",
    "vo",
    "wi",
    "ze",
    "mo",
    "ru",
    "li",
    "ta",
    "ko",
    "ni",
    "ve",
)
TEMPLATES = (
    "Who mentored the founder of {company}?",
    "Who was the mentor of the person who founded {company}?",
)
PREFACE = "Search, then answer. "
KIND = "exact_match"


@dataclass(frozen=True)
class Chain:
    company: str
    founder: str
    mentor: str


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(syllables)).capitalize()


def _names(rng: random.Random, n: int, person: bool, taken: set[str]) -> list[str]:
    """n names whose distinguishing word (a company's name, a person's surname) is new to the world; a
    person's first name (two syllables) may recur."""
    out: list[str] = []
    while len(out) < n:
        key = _word(rng, 3)
        if key not in taken:
            taken.add(key)
            out.append(f"{_word(rng, 2)} {key}" if person else key)
    return out


def chains(seed: int, n: int) -> list[Chain]:
    """n chains; every company name and every surname is used once in the world."""
    rng, taken = random.Random(f"{seed}:multihop"), set()
    companies = _names(rng, n, False, taken)
    founders, mentors = _names(rng, n, True, taken), _names(rng, n, True, taken)
    return [Chain(c, f, m) for c, f, m in zip(companies, founders, mentors, strict=True)]


def _paragraphs(chain: Chain, supporting: bool) -> list[dict]:
    """The chain's two paragraphs: the company's (names its founder) and the founder's (names the mentor)."""
    return [
        {"title": chain.company, "text": f"{chain.company} was founded by {chain.founder}.", "is_supporting": supporting},
        {"title": chain.founder, "text": f"{chain.founder} was mentored by {chain.mentor}.", "is_supporting": supporting},
    ]  # fmt: skip


def question_row(chains_: list[Chain], i: int, distractors: int, split: str) -> dict:
    """Row i of its split: the chain's two supporting paragraphs and `distractors` paragraphs of the next rows'."""
    chain = chains_[i]
    others = [chains_[(i + k) % len(chains_)] for k in range(1, min(distractors, len(chains_) - 1) + 1)]
    extra = [p for o in others for p in _paragraphs(o, False)]
    paragraphs = _paragraphs(chain, True) + extra[i % 2 :: 2][:distractors]
    rng = random.Random(f"multihop:{split}:{i}")
    rng.shuffle(paragraphs)
    question = TEMPLATES[i % len(TEMPLATES)].format(company=chain.company)
    return {
        "id": f"multihop-{split}-{i}",
        "prompt": PREFACE + question,
        "answer": chain.mentor,
        "aliases": [chain.mentor.split()[-1]],
        "kind": KIND,
        "paragraphs": paragraphs,
        "hops": 2,
    }


def result_text(paragraph: dict) -> str:
    """What the tag format appends after a search whose top result is `paragraph`."""
    return f"\n<result>[1] {paragraph['title']}: {paragraph['text']}</result>\n"


def demonstration(row: dict, chain: Chain) -> dict:
    """The two-search episode a perfect searcher writes for `row` (about `chain`): policy and environment turns."""
    by_title = {p["title"]: p for p in row["paragraphs"] if p["is_supporting"]}
    company, founder = chain.company, chain.founder
    turns = [
        {"owner": "policy", "text": f"<search>{company}</search>"},
        {"owner": "environment", "text": result_text(by_title[company])},
        {"owner": "policy", "text": f"<search>{founder}</search>"},
        {"owner": "environment", "text": result_text(by_title[founder])},
        {"owner": "policy", "text": f"<answer>{row['answer']}</answer>"},
    ]
    response = "".join(t["text"] for t in turns)
    return {"id": row["id"].replace("multihop-", "multihop-demo-"), "prompt": row["prompt"], "response": response, "turns": turns}  # fmt: skip


def multihop_world(
    seed: int, train: int, heldout: int, demonstrations: int, distractors: int
) -> tuple[list[dict], list[dict], list[dict]]:
    """(train rows, held-out rows, demonstrations): held-out chains first, then training chains; the
    demonstrations are episodes on training questions of their own (never an RL prompt)."""
    all_chains = chains(seed, heldout + train + demonstrations)
    held, rest = all_chains[:heldout], all_chains[heldout:]
    train_chains, demo_chains = rest[:train], rest[train:]
    held_rows = [question_row(held, i, distractors, "heldout") for i in range(heldout)]
    train_rows = [question_row(train_chains, i, distractors, "train") for i in range(train)]
    demos = [
        demonstration(question_row(demo_chains, i, distractors, "sft"), demo_chains[i])
        for i in range(demonstrations)
    ]
    return train_rows, held_rows, demos
