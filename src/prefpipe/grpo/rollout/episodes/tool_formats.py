"""The registered tool formats (grpo.<run>.episodes.tool_format), each built for the run's tokenizer and its
environment's tools: `tags` (the documented tag format, format.py), `chat_template` (the family's own tool calls
through its chat template, chat_format.py: Hermes <tool_call> JSON or Llama 3.1 JSON, tool_calls.py; refused for a
template without tool support) and
`chat_template_or_tags` (the family's format where its template has one, else the tags)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prefpipe.grpo.rollout.episodes.chat_format import ChatTemplateFormat, NoToolTemplate
from prefpipe.grpo.rollout.episodes.format import TagFormat, ToolFormat

log = logging.getLogger(__name__)


def _chat_or_tags(tokenizer, tools: tuple[str, ...]) -> ToolFormat:
    try:
        return ChatTemplateFormat(tokenizer, tools)
    except NoToolTemplate as exc:
        log.warning("tool format: the tag format, since the chat template has no tool calls: %s", exc)
        return TagFormat()


TOOL_FORMATS: dict[str, Callable[..., ToolFormat]] = {
    "tags": lambda tokenizer, tools: TagFormat(),
    "chat_template": ChatTemplateFormat,
    "chat_template_or_tags": _chat_or_tags,
}


def build_tool_format(name: str, tokenizer, tools: tuple[str, ...], key: str = "tool_format") -> ToolFormat:
    """The format `name` for `tokenizer` and the environment's `tools`; a ValueError names `key`."""
    if name not in TOOL_FORMATS:
        raise ValueError(f"{key} must be one of {sorted(TOOL_FORMATS)}, got {name!r}")
    try:
        return TOOL_FORMATS[name](tokenizer, tuple(tools))
    except NoToolTemplate as exc:
        raise ValueError(
            f"{key}: {name} needs a chat template that writes tool calls and tool messages, and this policy's "
            f"tokenizer has none: {exc}. Use tags, or chat_template_or_tags to fall back to tags."
        ) from exc
