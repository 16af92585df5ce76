"""Multi-step arithmetic for the reasoning section: a correct chain versus the same chain with one flaw.

A chain applies two or three single-digit additions or subtractions left to right ("3 + 4 = 7. 7 - 5 = 2.
Answer: 2"). The rejected
chain has exactly one flaw, like a math-prm negative, and looks as tidy as the correct one (same length):
- slip: one step's result is off by a little and later steps build on it (checking needs the arithmetic);
- carry: a step starts from a number other than the previous result (checking needs only a comparison);
- copy: every step is right but the final answer is not the last result (again a comparison).
The comparison kinds are what a small reward model learns; slips are what it has to work for.
"""

from __future__ import annotations

import operator
import random

OPS = {"+": operator.add, "-": operator.sub}
PROMPTS = (
    "Compute {expr} step by step.",
    "Work out {expr}. Show each step.",
    "Solve {expr} one step at a time.",
)


def _operands(rng: random.Random, n_ops: int) -> tuple[list[int], list[str]]:
    """Single-digit additions and subtractions whose every intermediate value stays in 0..9: each step is a
    fact the base model was taught (the add/sub demonstrations), so a flaw is within a small model's reach."""
    while True:
        values = [rng.randint(1, 9)]
        ops = [rng.choice("+-") for _ in range(n_ops)]
        values += [rng.randint(1, 9) for _ in range(n_ops)]
        if all(0 <= v <= 9 for v in _running(values, ops)):
            return values, ops


def _running(values: list[int], ops: list[str]) -> list[int]:
    out = [values[0]]
    for op, operand in zip(ops, values[1:], strict=True):
        out.append(OPS[op](out[-1], operand))
    return out


def _expression(values: list[int], ops: list[str]) -> str:
    text = str(values[0])
    for i, (op, operand) in enumerate(zip(ops, values[1:], strict=True)):
        text = f"{text} {op} {operand}"
        if i < len(ops) - 1:
            text = f"({text})"
    return text


FLAWS = ("slip", "carry", "copy")


def _chain(values: list[int], ops: list[str], flaw: str | None, wrong_step: int, delta: int) -> str:
    """Write the chain, with `flaw` (None = correct) at `wrong_step`, off by `delta`."""
    current = values[0]
    steps = []
    for i, (op, operand) in enumerate(zip(ops, values[1:], strict=True)):
        start = current + (delta if flaw == "carry" and i == wrong_step else 0)
        result = OPS[op](start, operand) + (delta if flaw == "slip" and i == wrong_step else 0)
        steps.append(f"{start} {op} {operand} = {result}.")
        current = result
    answer = current + (delta if flaw == "copy" else 0)
    return " ".join(steps) + f" Answer: {answer}"


def reasoning_pair(rng: random.Random) -> tuple[str, str, str]:
    """(prompt, correct chain, chain with one wrong step)."""
    n_ops = rng.choice((2, 3))
    values, ops = _operands(rng, n_ops)
    prompt = rng.choice(PROMPTS).format(expr=_expression(values, ops))
    flaw = rng.choice(FLAWS)
    # A carried value is wrong from the second step on (the first step starts from the prompt's number).
    wrong_step = rng.randrange(1, n_ops) if flaw == "carry" else rng.randrange(n_ops)
    running = _running(values, ops)
    anchor = running[wrong_step] if flaw == "carry" else running[wrong_step + 1]
    if flaw == "copy":
        anchor = running[-1]
    deltas = [d for d in (-2, -1, 1, 2) if anchor + d >= 0 and len(str(anchor + d)) == len(str(anchor))]
    delta = rng.choice(deltas or [1])
    return prompt, _chain(values, ops, None, 0, 0), _chain(values, ops, flaw, wrong_step, delta)
