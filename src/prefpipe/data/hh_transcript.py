"""HH-RLHF "Human: ...\\n\\nAssistant: ..." transcripts: split off the final reply, parse a history into turns.

Kept apart from prefpipe.data.normalize because both the pair sources and the RL prompt sources read HH text.
"""

from __future__ import annotations

import re

from prefpipe.common.chat import Message

ASSISTANT_MARK = "\n\nAssistant:"
# An HH transcript turn: a blank line, then "Human:" or "Assistant:" (the layout prefpipe.common.chat renders).
_HH_TURN = re.compile(r"\n\n(Human|Assistant):")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


class TranscriptError(ValueError):
    """A transcript without the turn it needs (normalize reports it as an unrecognised_shape row)."""


def split_transcript(transcript: str) -> tuple[str, str]:
    """Split an HH transcript at its LAST assistant turn into (earlier dialogue, final assistant reply).

    The dialogue keeps its "Human: ... \\n\\nAssistant: ..." turns without the transcript's leading blank
    lines; the reply loses only the single space that follows "Assistant:".
    """
    cut = transcript.rfind(ASSISTANT_MARK)
    if cut < 0:
        raise TranscriptError("transcript has no '\\n\\nAssistant:' turn")
    reply = transcript[cut + len(ASSISTANT_MARK) :]
    return transcript[:cut].strip(), reply.removeprefix(" ")


def parse_transcript(text: str) -> list[Message] | None:
    """An HH "Human: ...\\n\\nAssistant: ..." history as chat messages, or None when `text` is not one (it must
    start with "Human:" and end on a human turn; a trailing empty "Assistant:" marker, as in the verbatim HH
    prompts, is dropped). Each turn loses only the single space after its label; two turns in a row from one
    speaker (a few HH rows) become one turn joined by the blank line between them, as chat templates that
    require alternating roles (Gemma, Llama 2) would otherwise refuse the row."""
    body = "\n\n" + text.lstrip("\n")
    if not body.startswith("\n\nHuman:"):
        return None
    parts = _HH_TURN.split(body)  # ["", label, content, label, content, ...]
    turns: list[Message] = []
    for label, content in zip(parts[1::2], parts[2::2], strict=True):
        role, content = _HH_ROLES[label], content.removeprefix(" ")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    if turns[-1]["role"] == "assistant" and not turns[-1]["content"].strip():
        turns.pop()
    if not turns or turns[-1]["role"] != "user":
        return None
    return turns
