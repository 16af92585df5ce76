"""What the pipeline may know about each built-in head type without building one (no torch here): whether it
gives one scalar reward per response or only a pairwise score, whether it is Bayesian, and the name a report
prints for it.

One home: the registry (prefpipe.reward.heads.registry) gives each registered head class its flags from this
table, and the report reads the same table (it never imports torch). A head registered without an entry here
(a test's throwaway head) keeps the flags its class declares; the report then knows it by its name only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadFacts:
    display: str  # the head's name in a report's sentences
    scalar_reward: bool  # one reward r(x, y) per response (`head.rewards(enc)`); False: pairwise only
    bayesian: bool  # a posterior: compare() returns Var[s], head.bayes options, risk-averse GRPO rewards
    math: str  # what the head computes, in a sentence or three (an exported model's card)

    @property
    def pairwise(self) -> bool:
        """Scores exist only for a pair, s(a > b | x), so intransitive (cyclic) preferences are learnable."""
        return not self.scalar_reward


# The built-in heads, in the order a report lists them.
HEAD_FACTS: dict[str, HeadFacts] = {
    "bt": HeadFacts(
        "BT",
        scalar_reward=True,
        bayesian=False,
        math="Bradley-Terry: one reward r(x, y) = w . h + b per response; "
        "P(a > b | x) = sigmoid((r(a) - r(b)) / tau).",
    ),
    "gpm": HeadFacts(
        "GPM",
        scalar_reward=False,
        bayesian=False,
        math="General Preference Model: an embedding v(y) of 2k numbers per response (unit length when "
        "normalised) and a prompt gate lambda(x) = k softmax(G h_x / sqrt(H)); s(a > b | x) = sum_l lambda_l "
        "(a_2l b_2l+1 - a_2l+1 b_2l), skew-symmetric, so preferences may be cyclic; P(a > b | x) = sigmoid(s / tau).",
    ),
    "bgpm": HeadFacts(
        "Bayesian GPM",
        scalar_reward=False,
        bayesian=True,
        math="Bayesian GPM: a diagonal Gaussian posterior N(mean(y), var(y)) over the GPM embedding; "
        "s(a > b | x) of the means with its closed-form variance Var[s], and P(a > b | x) = E[sigmoid(s~ / tau)] "
        "for s~ ~ N(s, Var[s]), integrated numerically.",
    ),
}


def head_facts(head_type: str | None) -> HeadFacts | None:
    """The facts of a head type; None for a type this table does not describe."""
    return HEAD_FACTS.get(head_type) if head_type is not None else None
