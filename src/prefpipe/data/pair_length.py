"""Which response of a pair is longer, measured one way for every stage that asks.

Length is the response text's number of characters (`response_length`): on the HH-RLHF helpful test file this
measure reproduces the data README's "longer wins" baseline (prefpipe.evaluation.length_split says how). The
group names are summary keys: the evaluation's length split and the reward stage's length balancing
(prefpipe.reward.length_balance) both report under them.
"""

from __future__ import annotations

CHOSEN_LONGER = "chosen_longer"
CHOSEN_SHORTER = "chosen_shorter"
EQUAL_LENGTH = "equal"
LENGTH_BUCKETS = (CHOSEN_LONGER, CHOSEN_SHORTER, EQUAL_LENGTH)
LENGTH_MEASURE = "characters"  # what response_length counts (summaries record it as length_measure)


def response_length(text: str) -> int:
    """A response's length in characters (the measure that reproduces the HH data README's baseline)."""
    return len(text)


def length_group(chosen: str, rejected: str) -> str:
    """CHOSEN_LONGER, CHOSEN_SHORTER or EQUAL_LENGTH for a pair's two responses."""
    a, b = response_length(chosen), response_length(rejected)
    if a == b:
        return EQUAL_LENGTH
    return CHOSEN_LONGER if a > b else CHOSEN_SHORTER
