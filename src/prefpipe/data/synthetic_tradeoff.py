"""Chat Hard trade-offs: preferences pooled from annotators who weigh style differently, which cycle.

Three replies to a short writing request, each in one style (warm, formal, playful). Three annotators rank
them warm > formal > playful, formal > playful > warm and playful > warm > formal; the majority label of each
pair is then warm > formal, formal > playful and playful > warm (Condorcet's paradox, the GPM paper's motivation
for intransitive preferences in pooled human labels). Every triple contributes its three pairs, so a scalar
reward gets at most two of them right; a general preference model can get all three. Names and occasions of
the test triples never appear in training triples, so the model has to learn the styles, not the names.
"""

from __future__ import annotations

import itertools
import random

from prefpipe.common.config import ConfigError

NAMES = (
    "Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo", "Ida", "Jonas", "Kira", "Leo",
    "Maya", "Nils", "Olga", "Paul", "Rosa", "Sam", "Tara", "Viktor",
)  # fmt: skip
OCCASIONS = ("birthday", "new job", "graduation", "wedding", "retirement", "promotion")
PROMPTS = (
    "Write a short message for {name}'s {occasion}.",
    "Send {name} a note about the {occasion}.",
    "Draft a one-line card for {name} on the {occasion}.",
)
# Style -> reply templates; the cycle is warm > formal > playful > warm.
STYLES = (
    (
        "Dear {name}, I am so happy for you on your {occasion}. You deserve every bit of it!",
        "{name}, my heart is full for you today. Congratulations on the {occasion}, with love.",
    ),
    (
        "Dear {name}, please accept my sincere congratulations on your {occasion}. Kind regards.",
        "To {name}: congratulations on the occasion of your {occasion}. Best regards.",
    ),
    (
        "Woohoo {name}! Your {occasion} calls for cake and a dance party!",
        "Hey {name}, big {occasion} energy today! Let's celebrate!",
    ),
)
EDGES = ((0, 1), (1, 2), (2, 0))  # (preferred, rejected) style indices by majority vote


def split_keys(n_train: int, n_test: int, rng: random.Random, key: str) -> tuple[list, list]:
    """Disjoint (name, occasion) sets for train and test triples, each with a prompt and a template draw."""
    names = list(NAMES)
    rng.shuffle(names)
    cut = max(1, len(names) // 4)  # a quarter of the names are test-only
    test_names, train_names = names[:cut], names[cut:]

    def draw(pool: list[str], n: int, split: str) -> list[tuple]:
        combos = list(itertools.product(pool, range(len(OCCASIONS)), range(len(PROMPTS))))
        if n > len(combos):
            raise ConfigError(
                f"data.synthetic.{key}: {n} {split} trade-off triples exceed the {len(combos)} distinct ones"
            )
        rng.shuffle(combos)
        return [(*c, rng.randrange(2)) for c in combos[:n]]

    return draw(train_names, n_train, "train"), draw(test_names, n_test, "test")


def triple_rows(combo: tuple) -> list[tuple[str, str, str]]:
    """The three (prompt, chosen, rejected) pairs of one trade-off triple."""
    name, occasion_i, prompt_i, template_i = combo
    occasion = OCCASIONS[occasion_i]
    prompt = PROMPTS[prompt_i].format(name=name, occasion=occasion)
    replies = [style[template_i].format(name=name, occasion=occasion) for style in STYLES]
    return [(prompt, replies[w], replies[lo]) for w, lo in EDGES]
