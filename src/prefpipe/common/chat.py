"""One way to turn (conversation, response) into model text, shared by SFT, reward models, evaluation and GRPO.

Reward scores and policy log-probs are only comparable across stages when every stage formats text the same
way, so no stage builds its own strings. A conversation is a plain prompt string (one user turn) or a list of
{"role", "content"} messages (the history before the reply, see `conversation`). Chat models get their
tokenizer's chat template: a reward input is the template's rendering of history + the assistant's reply
(`format_pairs`); tokenizers without one get the plain layout "history\\n\\nresponse" + EOS (`plain_history`).
A response ends the way the template ends an assistant turn (`reply_end`): Gemma's <end_of_turn>, Phi-3's
<|end|> then <|endoftext|>, the EOS token elsewhere. A response starts the way the template starts a finished
assistant turn (`reply_start`): what it writes there beyond its generation prompt (Qwen3: an empty
<think></think> block, its non-thinking layout) is part of the prompt text, so a reward input is always the
policy's prompt text + reply + turn end. A template that refuses a system turn (Gemma 1 and 2, Mistral) gets
the system text folded into the first user turn, and one that refuses two turns in a row from one speaker
(Mistral) gets them joined (`template_turns`), in training, scoring and generation alike.

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
_REPLY_STARTS: dict[str, str] = {}
_PREFIX_WARNED: set[str] = set()
_REFUSES: dict[tuple[str, str], bool] = {}
# Histories a template may refuse (probed once per template): a system turn, two user turns in a row.
_PROBES = {
    "system": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
    "repeat": [{"role": "user", "content": "U"}, {"role": "user", "content": "V"}],
}
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


def refuses(tokenizer: Any, kind: str) -> bool:
    """Whether the chat template refuses a history of `kind` (_PROBES): "system", a system turn (Gemma 1 and 2:
    "System role not supported", Mistral); "repeat", two turns in a row from one speaker (Mistral: "roles must
    alternate"). Probed once per template."""
    key = (tokenizer.chat_template, kind)
    if key not in _REFUSES:
        from jinja2 import TemplateError

        try:
            tokenizer.apply_chat_template(_PROBES[kind], tokenize=False, add_generation_prompt=True)
            _REFUSES[key] = False
        except TemplateError:
            _REFUSES[key] = True
    return _REFUSES[key]


def template_turns(tokenizer: Any, prompt: Conversation) -> list[Message]:
    """The turns the chat template renders: `history`, except that where the template refuses a system turn, a
    leading one goes into the first user turn (its text, a blank line, the user's text: the layout Gemma 3's own
    template writes for one), and where it refuses two turns in a row from one speaker, such turns become one
    (joined by a blank line, as the HH transcript parser joins them). Without a user turn after a system turn,
    the template's own error stands."""
    turns = history(prompt)
    leading = len(turns) >= 2 and turns[0]["role"] == "system" and turns[1]["role"] == "user"
    if leading and refuses(tokenizer, "system"):
        folded = turns[0]["content"] + PLAIN_SEPARATOR + turns[1]["content"]
        turns = [{"role": "user", "content": folded}, *turns[2:]]
    repeated = any(a["role"] == b["role"] for a, b in zip(turns, turns[1:], strict=False))
    if not repeated or not refuses(tokenizer, "repeat"):
        return turns
    joined = [turns[0]]
    for turn in turns[1:]:
        if turn["role"] == joined[-1]["role"]:
            turn = {
                "role": turn["role"],
                "content": joined.pop()["content"] + PLAIN_SEPARATOR + turn["content"],
            }
        joined.append(turn)
    return joined


def format_prompt(tokenizer: Any, prompt: Conversation) -> str:
    """Text a policy is conditioned on before it generates (ends where the response starts): the template's
    generation prompt + `reply_start`."""
    if has_chat_template(tokenizer):
        turns = template_turns(tokenizer, prompt)
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        return text + reply_start(tokenizer)
    return plain_history(prompt) + PLAIN_SEPARATOR


def reply_start(tokenizer: Any) -> str:
    """What the chat template writes between its generation prompt and the text of a finished assistant reply:
    Qwen3's empty "<think>\n\n</think>\n\n" (the block its enable_thinking=False generation prompt writes), ""
    for the other families and for a template whose finished turn does not start with its generation prompt.
    Rendered once per template."""
    if not has_chat_template(tokenizer):
        return ""
    key = tokenizer.chat_template
    if key not in _REPLY_STARTS:
        from jinja2 import TemplateError

        user = [{"role": "user", "content": "Hi"}]
        try:
            prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
            turn = tokenizer.apply_chat_template(
                [*user, {"role": "assistant", "content": REPLY_PROBE}], tokenize=False
            )
        except (TemplateError, ValueError):
            prompt = turn = ""
        head, found, _ = turn.partition(REPLY_PROBE)
        _REPLY_STARTS[key] = head[len(prompt) :] if found and head.startswith(prompt) else ""
    return _REPLY_STARTS[key]


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
