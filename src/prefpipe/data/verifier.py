"""Ground-truth check of a policy completion for the synthetic world's RL prompts (used by GRPO and eval).

Parsing policy (one rule for every kind, so a reward can never depend on how a stage decodes):
1. The completion is cut at the first end marker (an EOS text such as ``<|eos|>``, ``</s>``, ``<|im_end|>``)
   in case a caller decoded without ``skip_special_tokens``.
2. Leading whitespace/newlines are dropped, then only the first line counts: everything after the next
   newline is ignored (a model may ramble on after answering; the answer line is what demonstrations teach).
3. That line is stripped and runs of whitespace collapse to one space, so `` CAT  DOG `` matches ``CAT DOG``.
4. The normalised line must equal the normalised answer exactly (case-sensitive: the uppercase task depends
   on case). Trailing text on the answer line ("7 apples", "7.") is wrong. Numeric kinds compare integers,
   so ``07`` and ``+7`` equal ``7``; the line must still be a bare integer.

Each task kind's check is a registered verifier (VERIFIERS: kind -> fn(reference, completion) -> score), so a
new kind is one function under ``@register_verifier("kind")``. A score is a float in [0, 1] (a bool counts as 0
or 1); `score` takes the best over the answer and its aliases, and a completion is correct (`verify`) when its
score is 1.

Chat-style kinds (RL prompts from files, `data.prompts.verifier`) read the final answer out of free text
(`prefpipe.data.answers`): `math` (final number, normalised), `exact_match` and `token_f1` (SQuAD-normalised
marked answer, else the whole completion), `format` (the reply ends with "The answer is X"; ignores the answer).
The first-line policy above applies to the synthetic kinds only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from prefpipe.common.config import ConfigError
from prefpipe.data.answers import (
    answer_text,
    cut_at_end_marker,
    ends_with_answer_statement,
    final_number,
    normalize_answer,
    normalize_number,
    token_f1,
)
from prefpipe.settings.data import NO_VERIFIER, PromptSourceSettings

_INT = re.compile(r"[+-]?\d+")

Verifier = Callable[[str, str], float | bool]  # (reference answer, completion) -> score in [0, 1]
VERIFIERS: dict[str, Verifier] = {}
KINDS = VERIFIERS.keys()  # every task kind with a verifier (a live view of the registry)


def register_verifier(*kinds: str) -> Callable[[Verifier], Verifier]:
    """Decorator: `fn(reference, completion) -> score in [0, 1]` grades completions of tasks of these kinds."""

    def decorate(fn: Verifier) -> Verifier:
        for kind in kinds:
            if kind in VERIFIERS and VERIFIERS[kind] is not fn:
                raise ValueError(f"task kind {kind!r} already has a verifier ({VERIFIERS[kind].__name__})")
            VERIFIERS[kind] = fn
        return fn

    return decorate


def check_verifier(settings: PromptSourceSettings, key: str = "data.prompts") -> None:
    """`<key>.verifier` names a registered verifier (or `none`); ConfigError naming the key otherwise. The
    settings layer cannot ask this registry, so the config checks (prefpipe.config_checks) and the prompt
    loader do."""
    if settings.source != "synthetic" and settings.has_answers and settings.verifier not in VERIFIERS:
        raise ConfigError(
            f"{key}.verifier {settings.verifier!r} is not a registered verifier "
            f"({sorted(VERIFIERS)}) or {NO_VERIFIER!r}"
        )


def answer_line(completion: str) -> str:
    """The part of a completion that is graded: up to an end marker, first line, whitespace-normalised."""
    completion = cut_at_end_marker(completion).lstrip("\r\n ")
    first = completion.split("\n", 1)[0]
    return " ".join(first.split())


@register_verifier("add", "sub", "count")
def integer_answer(answer: str, completion: str) -> bool:
    """The answer line is a bare integer equal to the answer (``07`` and ``+7`` equal ``7``)."""
    got = answer_line(completion)
    want = " ".join(answer.split())
    return bool(_INT.fullmatch(got)) and _INT.fullmatch(want) is not None and int(got) == int(want)


@register_verifier("upper", "repeat", "sort", "first", "last")
def exact_answer_line(answer: str, completion: str) -> bool:
    """The answer line equals the whitespace-normalised answer exactly (case-sensitive)."""
    return answer_line(completion) == " ".join(answer.split())


@register_verifier("math")
def math_answer(answer: str, completion: str) -> bool:
    """The completion's final number (####, \\boxed{}, "the answer is", else its last number) equals the answer's."""
    want = normalize_number(answer)
    return want is not None and final_number(completion) == want


@register_verifier("exact_match")
def exact_match_answer(answer: str, completion: str) -> bool:
    """The marked answer (else the whole completion) equals the answer after SQuAD normalisation."""
    return normalize_answer(answer_text(completion)) == normalize_answer(answer)


@register_verifier("token_f1")
def token_f1_answer(answer: str, completion: str) -> float:
    """SQuAD token F1 of the marked answer (else the whole completion) against the answer."""
    return token_f1(answer_text(completion), answer)


@register_verifier("format")
def answer_format(answer: str, completion: str) -> bool:
    """The reply ends with "The answer is X" (the format an instruction such as data.prompts.instruction asks)."""
    return ends_with_answer_statement(completion)


def _verifier(kind: str) -> Verifier:
    if kind not in VERIFIERS:
        raise ValueError(f"verify: unknown task kind {kind!r}; known kinds: {sorted(VERIFIERS)}")
    return VERIFIERS[kind]


def score(kind: str, answer: str, completion: str, aliases: Sequence[str] = ()) -> float:
    """The best score in [0, 1] of the completion against the answer and each of its aliases."""
    check = _verifier(kind)
    return max(float(check(reference, completion)) for reference in (answer, *aliases))


def verify(kind: str, answer: str, completion: str, aliases: Sequence[str] = ()) -> bool:
    """True when the completion is fully correct (score 1) for a task of this kind."""
    return score(kind, answer, completion, aliases) >= 1.0
