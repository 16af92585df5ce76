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

Each task kind's check is a registered verifier (VERIFIERS: kind -> fn(answer, completion) -> bool), so a new
kind is one function under ``@register_verifier("kind")``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

END_MARKERS = ("<|eos|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "</s>", "<eos>", "<|end|>")
_INT = re.compile(r"[+-]?\d+")

Verifier = Callable[[str, str], bool]  # (answer, completion) -> correct
VERIFIERS: dict[str, Verifier] = {}
KINDS = VERIFIERS.keys()  # every task kind with a verifier (a live view of the registry)


def register_verifier(*kinds: str) -> Callable[[Verifier], Verifier]:
    """Decorator: `fn(answer, completion) -> bool` grades completions of tasks of these kinds."""

    def decorate(fn: Verifier) -> Verifier:
        for kind in kinds:
            if kind in VERIFIERS and VERIFIERS[kind] is not fn:
                raise ValueError(f"task kind {kind!r} already has a verifier ({VERIFIERS[kind].__name__})")
            VERIFIERS[kind] = fn
        return fn

    return decorate


def answer_line(completion: str) -> str:
    """The part of a completion that is graded: up to an end marker, first line, whitespace-normalised."""
    for marker in END_MARKERS:
        cut = completion.find(marker)
        if cut >= 0:
            completion = completion[:cut]
    completion = completion.lstrip("\r\n ")
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


def verify(kind: str, answer: str, completion: str) -> bool:
    """True when the completion's answer line is the ground-truth answer for a task of this kind."""
    if kind not in VERIFIERS:
        raise ValueError(f"verify: unknown task kind {kind!r}; known kinds: {sorted(VERIFIERS)}")
    return VERIFIERS[kind](answer, completion)
