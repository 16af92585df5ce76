"""What limits a multi-turn policy on held-out questions: each episode in exactly one class, so a low exact
match reads as a search, a reading or an answering failure rather than one number.

Classes, the first that applies (measured per episode by eval_policy: its exact match, its valid tool calls,
the support recall of what it retrieved, whether a result held the answer, whether it gave an answer):
  correct              the final answer is right (whatever the episode did to get there)
  no_search            not one valid tool call (none, or only malformed calls / unknown tools / failing tools)
  answer_seen_wrong    a result held the answer (or an alias), and the final answer is another one
  answer_seen_missing  a result held the answer, and the episode ended without one (a limit, or no tag)
  support_no_answer    it retrieved a supporting paragraph, but no result held the answer (a later hop never
                       searched, or the answer cut from a long result)
  no_support           it searched, but retrieved no supporting paragraph (and no result held the answer)
A row without supporting paragraphs (recall None) counts as having retrieved none.

What each class says limits the policy: `search` (no_search, no_support, support_no_answer: the answer never
reached the context), `reading` (answer_seen_wrong: it read the answer and wrote another), `answering`
(answer_seen_missing: it read the answer and never wrote one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CORRECT, NO_SEARCH, SEEN_WRONG, SEEN_MISSING, SUPPORT_NO_ANSWER, NO_SUPPORT = (
    "correct",
    "no_search",
    "answer_seen_wrong",
    "answer_seen_missing",
    "support_no_answer",
    "no_support",
)
CLASSES = (CORRECT, NO_SEARCH, NO_SUPPORT, SUPPORT_NO_ANSWER, SEEN_MISSING, SEEN_WRONG)
LIMITS = {
    NO_SEARCH: "search",
    NO_SUPPORT: "search",
    SUPPORT_NO_ANSWER: "search",
    SEEN_WRONG: "reading",
    SEEN_MISSING: "answering",
}


@dataclass(frozen=True)
class EpisodeOutcome:
    """What the classification reads of one episode."""

    correct: bool
    valid_calls: int
    support_recall: float | None
    answer_found: bool
    answered: bool


def classify(ep: EpisodeOutcome) -> str:
    """The episode's class (module docstring), the first that applies."""
    if ep.correct:
        return CORRECT
    if ep.valid_calls == 0:
        return NO_SEARCH
    if ep.answer_found:
        return SEEN_WRONG if ep.answered else SEEN_MISSING
    if ep.support_recall:
        return SUPPORT_NO_ANSWER
    return NO_SUPPORT


def failure_table(outcomes: Sequence[EpisodeOutcome]) -> dict:
    """Counts and shares per class (every class listed, zeros included) and the share each limit explains."""
    n = len(outcomes)
    counts = dict.fromkeys(CLASSES, 0)
    for ep in outcomes:
        counts[classify(ep)] += 1
    limits = dict.fromkeys(sorted(set(LIMITS.values())), 0)
    for name, limit in LIMITS.items():
        limits[limit] += counts[name]
    return {
        "n": n,
        "counts": counts,
        "shares": {k: v / n if n else None for k, v in counts.items()},
        "limits": {k: v / n if n else None for k, v in limits.items()},
    }
