"""Checkable assistant tasks of the synthetic world: prompts, ground truth, near misses and clearly bad answers.

Tasks are short on purpose (answers of one to four words or a number) so a tiny Llama trained from scratch can
learn them in a minute of CPU, and every answer is graded by `prefpipe.data.verifier.verify`. The same near
misses serve two jobs: the imperfect demonstrator's wrong answers (SFT) and the hard rejected responses of the
"chat hard" preference subsets, so the reward model learns exactly the mistakes the policy makes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORDS = (
    "ant",
    "bee",
    "cat",
    "cow",
    "dog",
    "elk",
    "fox",
    "hen",
    "owl",
    "pig",
    "rat",
    "yak",
    "box",
    "cup",
    "hat",
    "jam",
    "key",
    "map",
    "pen",
    "sun",
    "bird",
    "fish",
    "frog",
    "lamp",
    "star",
    "tree",
)
ARITH_KINDS = ("add", "sub")
WORD_KINDS = ("count", "upper", "repeat", "sort", "first", "last")
ALL_KINDS = ARITH_KINDS + WORD_KINDS
MAX_OPERAND = 9
MIN_WORDS, MAX_WORDS = 2, 4

TEMPLATES: dict[str, tuple[str, ...]] = {
    "add": ("What is {a} + {b}?", "Compute {a} + {b}.", "Add {a} and {b}."),
    "sub": ("What is {a} - {b}?", "Compute {a} - {b}.", "Subtract {b} from {a}."),
    "count": ("How many words are in: {w}?", "Count the words: {w}"),
    "upper": ("Uppercase: {w}", "Write in capital letters: {w}"),
    "repeat": ("Repeat: {w}", "Say exactly: {w}"),
    "sort": ("Sort alphabetically: {w}", "Put in alphabetical order: {w}"),
    "first": ("First word of: {w}", "Which word comes first in: {w}?"),
    "last": ("Last word of: {w}", "Which word comes last in: {w}?"),
}


@dataclass(frozen=True)
class Task:
    """One task instance: `prompt` is unique per (kind, arguments, phrasing); `answer` is the ground truth."""

    kind: str
    prompt: str
    answer: str
    args: tuple


def solve(kind: str, args: tuple) -> str:
    """Ground-truth answer of a task (the one place that defines what correct means)."""
    if kind == "add":
        return str(args[0] + args[1])
    if kind == "sub":
        return str(args[0] - args[1])
    words = list(args)
    if kind == "count":
        return str(len(words))
    if kind == "upper":
        return " ".join(w.upper() for w in words)
    if kind == "repeat":
        return " ".join(words)
    if kind == "sort":
        return " ".join(sorted(words))
    if kind == "first":
        return words[0]
    if kind == "last":
        return words[-1]
    raise ValueError(f"unknown task kind {kind!r}; known kinds: {list(ALL_KINDS)}")


def sample_task(kind: str, rng: random.Random) -> Task:
    """Draw arguments and a phrasing for `kind`."""
    if kind in ARITH_KINDS:
        a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
        if kind == "sub" and b > a:
            a, b = b, a
        args: tuple = (a, b)
        prompt = rng.choice(TEMPLATES[kind]).format(a=a, b=b)
    elif kind in WORD_KINDS:
        args = tuple(rng.sample(WORDS, rng.randint(MIN_WORDS, MAX_WORDS)))
        prompt = rng.choice(TEMPLATES[kind]).format(w=" ".join(args))
    else:
        raise ValueError(f"unknown task kind {kind!r}; known kinds: {list(ALL_KINDS)}")
    return Task(kind=kind, prompt=prompt, answer=solve(kind, args), args=args)


def near_misses(task: Task) -> list[str]:
    """Plausible wrong answers of the same form (a number stays a number, words stay those words).

    Listed with same-length misses first; `pick_near_miss` uses that order for the chat-hard subsets.
    """
    kind, args, answer = task.kind, task.args, task.answer
    out: list[str] = []
    if kind in ("add", "sub", "count"):
        value = int(answer)
        lowest = 1 if kind == "count" else 0
        out = [str(value + d) for d in (-1, 1, -2, 2) if value + d >= lowest]
    elif kind == "upper":
        up = [w.upper() for w in args]
        for i, w in enumerate(args):
            out.append(" ".join(up[:i] + [w] + up[i + 1 :]))  # one word left lowercase
            out.append(" ".join(up[:i] + [w.capitalize()] + up[i + 1 :]))  # one word title case
    elif kind in ("repeat", "sort"):
        base = list(args) if kind == "repeat" else sorted(args)
        for i in range(len(base) - 1):
            swapped = base[:i] + [base[i + 1], base[i]] + base[i + 2 :]
            out.append(" ".join(swapped))
        if kind == "sort":
            out.append(" ".join(args))  # left in the given order
        out.extend(" ".join(base[:i] + base[i + 1 :]) for i in range(len(base)))  # a word dropped
    elif kind in ("first", "last"):
        out = list(args) + [answer.capitalize()]  # another word of the list, or a casing slip
    else:
        raise ValueError(f"unknown task kind {kind!r}")
    unique = [m for m in dict.fromkeys(out) if m != answer]
    return sorted(unique, key=lambda m: len(m) != len(answer))  # stable: same length first


def habitual_miss(task: Task) -> str:
    """The demonstrator's one habitual mistake on a task: the same wrong rule every time (an off-by-one).

    Unlike random near misses, a habit can outweigh the right answer in the demonstrations, so a policy that
    imitates them has a wrong mode with the right answer still in its support: the case RL with a verifier
    fixes and imitation cannot (`data.synthetic.demo_habit_kinds`).
    """
    kind, args, answer = task.kind, task.args, task.answer
    if kind in ("add", "sub", "count"):
        return str(int(answer) + 1)  # one too many
    if kind == "first":
        return args[1]  # the neighbouring word
    if kind == "last":
        return args[-2]
    if kind == "upper":
        return " ".join([w.upper() for w in args[:-1]] + [args[-1]])  # the last word left lowercase
    if kind in ("repeat", "sort"):
        base = list(args) if kind == "repeat" else sorted(args)
        given = " ".join(args)
        if kind == "sort" and given != answer:
            return given  # left in the given order
        return " ".join(base[:-2] + [base[-1], base[-2]])  # the last two swapped
    raise ValueError(f"unknown task kind {kind!r}")


def pick_near_miss(task: Task, rng: random.Random, same_length: bool) -> str:
    """A random near miss; with `same_length`, one of the same character length when there is one."""
    misses = near_misses(task)
    if not misses:
        raise ValueError(f"task {task.prompt!r} has no near miss")
    if same_length:
        same = [m for m in misses if len(m) == len(task.answer)]
        misses = same or misses
    return rng.choice(misses)
