"""One way to turn (conversation, response) into model text, shared by SFT, reward models, evaluation and GRPO.

Reward scores and policy log-probs are only comparable across stages when every stage formats text the same
way, so no stage builds its own strings. A conversation is a plain prompt string (one user turn) or a list of
{"role", "content"} messages (the history before the reply, see `conversation`). Chat models get their
tokenizer's chat template: a reward input is the template's rendering of history + the assistant's reply
(`format_pairs`); tokenizers without one get the plain layout "history\\n\\nresponse" + EOS (`plain_history`).
A response ends the way the template ends an assistant turn (`reply_end`): Gemma's <end_of_turn>, Phi-3's
<|end|> then <|endoftext|>, the EOS token elsewhere. A template that refuses a system turn (Gemma 1 and 2) gets
the system text folded into the first user turn (`template_turns`), in training, scoring and generation alike.

Standard library only (jinja2, transformers' template engine, where a template is rendered): an exported reward
model ships this very file as `prefpipe_chat.py` (prefpipe.export) and renders its inputs with it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

PLAIN_SEPARATOR = "\n\n"
REPLY_PROBE = "@@prefpipe-reply@@"  # stands for the reply when the template renders a finished turn
# Plain-layout role labels (the HH-RLHF transcript layout): how a history reads without a chat template.
ROLE_LABELS = {"system": "System", "user": "Human", "assistant": "Assistant"}
_REPLY_ENDS: dict[tuple[str, str | None], str | None] = {}
_PREFIX_WARNED: set[str] = set()
_REFUSES_SYSTEM: dict[str, bool] = {}
log = logging.getLogger(__name__)

Message = dict[str, str]
Conversation = str | list[Message]  # a plain string is one user turn


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def conversation(row: dict) -> Conversation:
    """A row's history before the reply: its `messages` list where it has one, else its plain `prompt`."""
    messages = row.get("messages")
    return messages if messages else row["prompt"]


def conversation_key(prompt: Conversation) -> str | tuple[str, str]:
    """A hashable key for a conversation (a message list is not): equal keys, equal conversations; a prompt
    string never shares a key with a message list."""
    return prompt if isinstance(prompt, str) else ("messages", json.dumps(prompt, sort_keys=True))


def is_messages(value: object) -> bool:
    """Whether `value` is a usable history: a non-empty list of {"role", "content"} text messages whose roles
    are ROLE_LABELS' and whose last turn is the user's (a `messages` field as the data stage writes it)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and m.get("role") in ROLE_LABELS and isinstance(m.get("content"), str)
            for m in value
        )
        and value[-1]["role"] == "user"
    )


def history(prompt: Conversation) -> list[Message]:
    """The conversation as chat messages: a plain prompt is one user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def plain_history(prompt: Conversation) -> str:
    """The plain (no chat template) text of a conversation: one user turn is its text; a longer history is the
    HH transcript "Human: ...\\n\\nAssistant: ...\\n\\nHuman: ..." (ROLE_LABELS)."""
    turns = history(prompt)
    if len(turns) == 1 and turns[0]["role"] == "user":
        return turns[0]["content"]
    return PLAIN_SEPARATOR.join(f"{ROLE_LABELS[m['role']]}: {m['content']}" for m in turns)


def refuses_system(tokenizer: Any) -> bool:
    """Whether the chat template refuses a system turn (Gemma 1 and 2: "System role not supported"); probed
    once per template."""
    key = tokenizer.chat_template
    if key not in _REFUSES_SYSTEM:
        from jinja2 import TemplateError

        probe = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
        try:
            tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
            _REFUSES_SYSTEM[key] = False
        except TemplateError:
            _REFUSES_SYSTEM[key] = True
    return _REFUSES_SYSTEM[key]


def template_turns(tokenizer: Any, prompt: Conversation) -> list[Message]:
    """The turns the chat template renders: `history`, except that a leading system turn goes into the first
    user turn (its text, a blank line, the user's text) where the template refuses a system turn, the layout
    Gemma 3's own template writes for one. Without a user turn after it, the template's own error stands."""
    turns = history(prompt)
    if len(turns) < 2 or turns[0]["role"] != "system" or turns[1]["role"] != "user":
        return turns
    if not refuses_system(tokenizer):
        return turns
    folded = turns[0]["content"] + PLAIN_SEPARATOR + turns[1]["content"]
    return [{"role": "user", "content": folded}, *turns[2:]]


def format_prompt(tokenizer: Any, prompt: Conversation) -> str:
    """Text a policy is conditioned on before it generates (ends where the response starts)."""
    if has_chat_template(tokenizer):
        turns = template_turns(tokenizer, prompt)
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return plain_history(prompt) + PLAIN_SEPARATOR


def reply_end(tokenizer: Any) -> str | None:
    """What follows a finished reply: the chat template's end of an assistant turn, trailing whitespace dropped
    (Gemma: <end_of_turn>; Phi-3: <|end|>, a newline and <|endoftext|>; Llama 3, ChatML, Mistral and the scratch
    base: their EOS token), else the EOS token (no template; a template that writes nothing after the reply, or
    whose finished turn does not start with its generation prompt). Rendered once per template."""
    eos = getattr(tokenizer, "eos_token", None)
    if not has_chat_template(tokenizer):
        return eos
    key = (tokenizer.chat_template, eos)
    if key not in _REPLY_ENDS:
        from jinja2 import TemplateError

        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": REPLY_PROBE}]
        try:
            turn = tokenizer.apply_chat_template(messages, tokenize=False)
        except (TemplateError, ValueError):  # a template that cannot render a finished turn: EOS ends replies
            turn = ""
        head, found, tail = turn.partition(REPLY_PROBE)
        end = tail.rstrip()
        _REPLY_ENDS[key] = end if found and end and head == format_prompt(tokenizer, "Hi") else eos
    return _REPLY_ENDS[key]


def _ended(text: str, end: str | None) -> str:
    return text + end if end and not text.endswith(end) else text


def _template_turn(tokenizer: Any, prompt: Conversation, head: str, response: str, end: str | None) -> str:
    """The template's own rendering of history + [assistant reply], up to the end of that turn (whitespace the
    template writes after the turn end is dropped: last-token pooling reads the turn-end token). A template
    whose rendering does not start with its generation prompt `head` (it renders the history differently once
    the reply is there) gets head + response + end instead, so a pair's two inputs still share their prefix."""
    turns = template_turns(tokenizer, prompt) + [{"role": "assistant", "content": response}]
    full = tokenizer.apply_chat_template(turns, tokenize=False)
    if not full.startswith(head):
        if tokenizer.chat_template not in _PREFIX_WARNED:
            _PREFIX_WARNED.add(tokenizer.chat_template)
            log.warning("chat template renders the history differently after a reply; using prompt + reply")
        return _ended(head + response, end)
    stripped = full.rstrip()
    return stripped if end and stripped.endswith(end) else _ended(full, end)


def format_pair(tokenizer: Any, prompt: Conversation, response: str, add_eos: bool = True) -> str:
    """Conversation and response as one sequence (a reward input, an SFT row); see format_pairs."""
    return format_pairs(tokenizer, [prompt], [response], add_eos)[1][0]


def format_pairs(
    tokenizer: Any, prompts: list[Conversation], responses: list[str], add_eos: bool = True
) -> tuple[list[str], list[str]]:
    """Formatted prompts (format_prompt) and formatted pairs, row by row, each distinct prompt rendered once.

    With a chat template and add_eos, a pair is the template's rendering of the whole conversation, the reply
    as the final assistant turn, ending at the turn end (`_template_turn`); it starts with the formatted
    prompt, so two responses to one conversation share the identical prefix. Without a template (or without
    add_eos: text a policy continues), it is the formatted prompt + response (+ `reply_end`)."""
    rendered: dict[str | tuple[str, str], str] = {}
    end = reply_end(tokenizer) if add_eos else None
    templated = add_eos and has_chat_template(tokenizer)
    heads, texts = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        key = conversation_key(prompt)
        head = rendered.get(key)
        if head is None:
            head = rendered[key] = format_prompt(tokenizer, prompt)
        if templated:
            texts.append(_template_turn(tokenizer, prompt, head, response, end))
        else:
            texts.append(_ended(head + response, end))
        heads.append(head)
    return heads, texts
