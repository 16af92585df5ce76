"""A synthetic multi-hop world for multi-turn GRPO: questions whose answer needs two searches over a tiny corpus.

Each question is about a company C, founded by a person F, who was mentored by a person M: "Who mentored the
founder of C?" (answer M). The row's corpus holds one paragraph per entity, C's ("C, founded by F.") and F's
("F, whose mentor was M."), both supporting, plus `distractors` paragraphs of other rows' entities. A founder's
own paragraph names them twice (title and text), so BM25 ranks it above the company paragraph that names them
once. Search C, read F in the result, search F, read M, answer.

Names are built from fixed lists of short whole words so that a tiny scratch base can copy them: a company is
an adjective and a noun ("Red Mill"), a person a first name and a surname ("Ada Hale"). Every word is frequent
in the demonstrations, so the scratch tokenizer learns it as one token, and the text never puts a space after a
name's last word (it is followed by punctuation or a tag), so a name tokenises the same way wherever it appears
and copying it is copying tokens. Each name to copy follows a token found nowhere else in the episode ("of" in the
question, "by" before the founder, "was" before the mentor), so copying is the simplest lookup an attention head
makes: the tokens after that one. With names of syllables drawn afresh (the earlier form of this world) a name
was 4-5 tokens whose last piece changed with what followed it, and a 2-layer base searched but copied names
inexactly (benchmarks/multihop_search.py).

Facts are per question: each row's corpus is its own small world, the founder and the mentor drawn at random
for that row, so no fact can be remembered from training and answering needs reading. Held-out questions use
their own companies and persons: a seeded quarter of the company names and of the person names, never in a
training question or a demonstration (the words recur, the names do not).

An imperfect demonstrator (`shortcut_rate`): a share of the demonstrations stop after the first search and answer
the founder, the habit of a searcher that skips the second hop. Above half, the SFT policy's most likely episode
is the wrong one-search answer while the two-search one stays in its support: room for a verifier-rewarded RL
run to raise held-out exact match, tool calls and support recall (as data.synthetic.demo_habit_rate does for the
built-in tasks).

Rows (the RL prompt files' shape, grpo/rollout/episodes): {id, prompt, answer, aliases ([]), kind: exact_match,
paragraphs: [{title, text, is_supporting}], hops: 2}. Demonstrations add `turns`: the policy's and the
environment's texts in order ({owner, text}), the environment's written as the tag format renders the search
environment's top result (`<result>[1] title: text</result>` on its own line; tests/test_multihop_world.py checks
them against the real environment), and `response`, their concatenation. Determinism: one
`random.Random("<seed>:multihop")`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ADJECTIVES = ("Red", "Blue", "Gold", "Iron", "Oak", "Pine", "Grey", "Green", "North", "South", "East", "West")
NOUNS = ("Mill", "Forge", "Field", "Bridge", "Gate", "Peak", "Yard", "Port", "Lake", "Hill", "Works", "Labs")
FIRST_NAMES = ("Ada", "Ben", "Cal", "Dan", "Eve", "Fay", "Gus", "Ida", "Jay", "Kim", "Max", "Ned")
SURNAMES = ("Hale", "Reed", "Park", "Lowe", "Moss", "Nash", "Pike", "Rowe", "Snow", "Tate", "Ward", "Shaw")
# The world's own vocabulary: the words its names are made of, the words only its questions and paragraphs use,
# and the tag format's tags. prep_data writes them to WHOLE_WORDS_FILE; a scratch tokenizer adds each as one
# token and learns its BPE merges from the rest of the corpus (prefpipe.base.tokenizer, base/build.py), so a
# name is copied token for token, an episode fits base.sft.max_length, and adding the world to a run leaves the
# other tasks' tokenization as it was except where a name word occurs in them.
NAME_WORDS = ADJECTIVES + NOUNS + FIRST_NAMES + SURNAMES
WORLD_WORDS = ("Who", "mentored", "founder", "founded", "whose", "mentor", "was")
TAGS = ("<search>", "</search>", "<result>", "</result>", "<answer>", "</answer>")
WHOLE_TOKENS = NAME_WORDS + WORLD_WORDS + TAGS
WHOLE_WORDS_FILE = "whole_words.json"
TEMPLATES = ("Who mentored the founder of {company}?",)
KIND = "exact_match"
HELDOUT_SHARE = 0.25


@dataclass(frozen=True)
class Chain:
    company: str
    founder: str
    mentor: str


@dataclass(frozen=True)
class Names:
    """The companies and persons one split draws from."""

    companies: tuple[str, ...]
    persons: tuple[str, ...]


def _split(names: list[str], rng: random.Random) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(held-out, training) names: a seeded HELDOUT_SHARE of them held out."""
    names = sorted(names)
    rng.shuffle(names)
    cut = round(len(names) * HELDOUT_SHARE)
    return tuple(names[:cut]), tuple(names[cut:])


def name_splits(rng: random.Random) -> tuple[Names, Names]:
    """(held-out names, training names): disjoint company names and disjoint person names."""
    held_c, train_c = _split([f"{a} {n}" for a in ADJECTIVES for n in NOUNS], rng)
    held_p, train_p = _split([f"{f} {s}" for f in FIRST_NAMES for s in SURNAMES], rng)
    return Names(held_c, held_p), Names(train_c, train_p)


def chains(rng: random.Random, names: Names, n: int) -> list[Chain]:
    """n chains over `names`: companies in a seeded order (each used once before any repeats), a founder and a
    different mentor drawn for each."""
    order: list[str] = []
    out = []
    for _ in range(n):
        if not order:
            order = list(names.companies)
            rng.shuffle(order)
        founder, mentor = rng.sample(names.persons, 2)
        out.append(Chain(order.pop(), founder, mentor))
    return out


def _paragraphs(chain: Chain, supporting: bool) -> list[dict]:
    """The chain's two paragraphs: the company's (names its founder) and the founder's (names the mentor)."""
    return [
        {"title": chain.company, "text": f"{chain.company}, founded by {chain.founder}.", "is_supporting": supporting},
        {"title": chain.founder, "text": f"{chain.founder}, whose mentor was {chain.mentor}.", "is_supporting": supporting},
    ]  # fmt: skip


def _clashes(chain: Chain, other: Chain) -> bool:
    """A distractor chain that shares a name with the row's could answer a search for it."""
    return bool({chain.company, chain.founder, chain.mentor} & {other.company, other.founder, other.mentor})


def question_row(chains_: list[Chain], i: int, distractors: int, split: str) -> dict:
    """Row i of its split: the chain's two supporting paragraphs and `distractors` paragraphs of the next rows'
    (chains sharing a name with this one skipped)."""
    chain = chains_[i]
    others = [chains_[(i + k) % len(chains_)] for k in range(1, len(chains_))]
    others = [o for o in others if not _clashes(chain, o)][:distractors]
    extra = [p for o in others for p in _paragraphs(o, False)]
    paragraphs = _paragraphs(chain, True) + extra[i % 2 :: 2][:distractors]
    rng = random.Random(f"multihop:{split}:{i}")
    rng.shuffle(paragraphs)
    question = TEMPLATES[i % len(TEMPLATES)].format(company=chain.company)
    return {
        "id": f"multihop-{split}-{i}",
        "prompt": question,
        "answer": chain.mentor,
        "aliases": [],
        "kind": KIND,
        "paragraphs": paragraphs,
        "hops": 2,
    }


def result_text(paragraph: dict) -> str:
    """What the tag format appends after a search whose top result is `paragraph`."""
    return f"\n<result>[1] {paragraph['title']}: {paragraph['text']}</result>\n"


def demonstration(row: dict, chain: Chain, shortcut: bool) -> dict:
    """The two-search episode a perfect searcher writes for `row` (about `chain`): policy and environment turns;
    `shortcut`: the demonstrator's habit instead, answering the founder after the first search."""
    by_title = {p["title"]: p for p in row["paragraphs"] if p["is_supporting"]}
    company, founder = chain.company, chain.founder
    turns = [
        {"owner": "policy", "text": f"<search>{company}</search>"},
        {"owner": "environment", "text": result_text(by_title[company])},
    ]
    if shortcut:
        turns.append({"owner": "policy", "text": f"<answer>{founder}</answer>"})
    else:
        turns += [
            {"owner": "policy", "text": f"<search>{founder}</search>"},
            {"owner": "environment", "text": result_text(by_title[founder])},
            {"owner": "policy", "text": f"<answer>{row['answer']}</answer>"},
        ]
    response = "".join(t["text"] for t in turns)
    return {"id": row["id"].replace("multihop-", "multihop-demo-"), "prompt": row["prompt"], "response": response, "turns": turns}  # fmt: skip


def multihop_world(
    seed: int, train: int, heldout: int, demonstrations: int, distractors: int, shortcut_rate: float
) -> tuple[list[dict], list[dict], list[dict]]:
    """(train rows, held-out rows, demonstrations): held-out rows over the held-out names, training rows and
    demonstrations (episodes on training questions of their own, never an RL prompt) over the training names;
    a seeded round(shortcut_rate * demonstrations) of them take the one-search shortcut (`shortcut`: true)."""
    rng = random.Random(f"{seed}:multihop")
    held_names, train_names = name_splits(rng)
    held = chains(rng, held_names, heldout)
    train_chains = chains(rng, train_names, train)
    demo_chains = chains(rng, train_names, demonstrations)
    held_rows = [question_row(held, i, distractors, "heldout") for i in range(heldout)]
    train_rows = [question_row(train_chains, i, distractors, "train") for i in range(train)]
    shortcuts = set(rng.sample(range(demonstrations), round(shortcut_rate * demonstrations)))
    demos = [
        demonstration(question_row(demo_chains, i, distractors, "sft"), demo_chains[i], i in shortcuts)
        | {"shortcut": i in shortcuts}
        for i in range(demonstrations)
    ]
    return train_rows, held_rows, demos
