"""Chat and Chat Hard pairs: the world's tasks answered in fluent sentences, against plausible wrong replies.

Both responses of a pair are written in the same register (a short sentence around the answer, 10-40 tokens),
so fluency and length say nothing; what differs is whether the reply does what was asked.
- Chat (easy to medium): the rejected reply is fluent but wrong in a way a reader spots at once: it answers a
  different question (the other operation, another word of the list), ignores the constraint (no capitals, not
  sorted), complies only in part, rambles to a wrong number (verbose but wrong), or refuses a harmless task.
- Chat Hard: both replies use the SAME phrasing and differ in one detail: an off-by-one number, one word left
  lowercase, two words swapped, one word dropped; the reward model has to check the answer itself.
Rejected kinds are drawn so that the longer reply is the chosen one about half the time in each subset.
"""

from __future__ import annotations

import random

from prefpipe.data.synthetic_tasks import ARITH_KINDS, WORD_KINDS, Task, pick_near_miss, sample_task

# Phrasings of a reply around its answer; {a} is the answer, {q} a restatement of the question.
ARITH_PHRASES = (
    "The answer is {a}.",
    "{q} = {a}.",
    "Sure. {q} equals {a}.",
    "Let me work it out: {q} = {a}. So the answer is {a}.",
    "That comes to {a}.",
    "I get {a} for {q}.",
    "Let me work it out carefully: {q} = {a}. I checked it twice, so the answer is {a}.",
)
WORD_PHRASES = (
    "Here you go: {a}",
    "The result is: {a}",
    "Sure! Here it is: {a}",
    "Done. The answer is {a}",
    "Okay, that gives {a}",
    "Here is what you asked for: {a}",
    "I followed your instruction word by word, and here is the result you asked for: {a}",
)
VERBOSE_ARITH = (
    "Let me think about this step by step. First I take {x}, then I apply the operation, and after checking "
    "twice I am confident the answer is {a}."
)
VERBOSE_WORD = (
    "I read the words carefully one by one and followed the instruction exactly, so the result is {a}"
)
OVER_REFUSALS = (
    "Sorry, I can't help with that request.",
    "I'm not able to answer this one, sorry.",
    "I would rather not do that. Please ask something else.",
)
EVASIVE = (
    "That is an interesting question, and there are many ways to look at it.",
    "It depends on how you look at it, so I will leave it to you.",
    "Good question! Let me know if there is anything else I can do.",
)


def _question(task: Task) -> str:
    """A restatement of an arithmetic task ('3 + 4'), used inside phrasings."""
    a, b = task.args
    return f"{a} {'+' if task.kind == 'add' else '-'} {b}"


def phrase(task: Task, answer: str, phrasing: int) -> str:
    """`answer` in reply phrasing number `phrasing` (index into the kind's phrase list, taken modulo)."""
    phrases = ARITH_PHRASES if task.kind in ARITH_KINDS else WORD_PHRASES
    return phrases[phrasing % len(phrases)].format(
        a=answer, q=_question(task) if task.kind in ARITH_KINDS else ""
    )


def _n_phrasings(task: Task) -> int:
    return len(ARITH_PHRASES if task.kind in ARITH_KINDS else WORD_PHRASES)


def by_length(rng: random.Random, options: list[str], other: str) -> str:
    """One of `options`, longer than `other` or shorter (a fair coin) when some option is: keeps "the longer
    reply wins" near chance in every subset."""
    longer = rng.random() < 0.5
    fits = [o for o in options if len(o) != len(other) and (len(o) > len(other)) == longer]
    return rng.choice(fits or options)


def _other_question_answer(task: Task, rng: random.Random) -> str:
    """The answer to a neighbouring question: the other operation, or another kind on the same words."""
    if task.kind in ARITH_KINDS:
        a, b = task.args
        alternatives = [str(a - b if task.kind == "add" else a + b), str(a * b)]
        out = [x for x in alternatives if x != task.answer]
        return rng.choice(out) if out else pick_near_miss(task, rng, same_length=False)
    words = list(task.args)
    alternatives = {
        "count": [str(len(words) + 1), " ".join(words)],
        "upper": [" ".join(words), " ".join(sorted(words)).upper()],
        "repeat": [" ".join(reversed(words)), " ".join(w.upper() for w in words)],
        "sort": [" ".join(words), " ".join(sorted(words, reverse=True))],
        "first": [words[-1], words[1]],
        "last": [words[0], words[-2]],
    }[task.kind]
    out = [x for x in alternatives if x != task.answer]
    return rng.choice(out) if out else pick_near_miss(task, rng, same_length=False)


def _chat_rejected(task: Task, rng: random.Random) -> tuple[str, str]:
    """(chosen, rejected) for the Chat section: a correct reply and one of five clearly wrong ones."""
    n = _n_phrasings(task)
    style = rng.randrange(5)
    if style == 0:  # answers a neighbouring question, same register
        rejected = phrase(task, _other_question_answer(task, rng), rng.randrange(n))
    elif style == 1:  # verbose but wrong
        wrong = pick_near_miss(task, rng, same_length=False)
        text = VERBOSE_ARITH if task.kind in ARITH_KINDS else VERBOSE_WORD
        rejected = text.format(a=wrong, x=task.args[0])
    elif style == 2:  # over-refusal of a harmless task
        rejected = rng.choice(OVER_REFUSALS)
    elif style == 3:  # evasive, no answer at all
        rejected = rng.choice(EVASIVE)
    else:  # a wrong answer stated with confidence
        rejected = phrase(task, pick_near_miss(task, rng, same_length=False), rng.randrange(n))
    chosen = by_length(rng, [phrase(task, task.answer, i) for i in range(n)], rejected)
    return chosen, rejected


def _chat_hard_rejected(task: Task, rng: random.Random) -> tuple[str, str]:
    """(chosen, rejected) for Chat Hard: the same phrasing, one detail wrong."""
    phrasing = rng.randrange(_n_phrasings(task))
    wrong = pick_near_miss(task, rng, same_length=True)
    return phrase(task, task.answer, phrasing), phrase(task, wrong, phrasing)


def _maker(kinds: tuple[str, ...], rejected):
    def make(rng: random.Random) -> tuple[str, str, str]:
        task = sample_task(rng.choice(kinds), rng)
        chosen, bad = rejected(task, rng)
        return task.prompt, chosen, bad

    return make


chat_arith = _maker(ARITH_KINDS, _chat_rejected)
chat_instruct = _maker(WORD_KINDS, _chat_rejected)
chathard_arith = _maker(ARITH_KINDS, _chat_hard_rejected)
chathard_instruct = _maker(WORD_KINDS, _chat_hard_rejected)
