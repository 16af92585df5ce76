"""The policy family's own tool-call format (`chat_template`): the tokenizer's chat template writes the tool
schemas into the prompt, the policy calls a tool the way its family does, and the result goes back as the
template's tool message.

The calls read are the Hermes layout that Qwen2.5, Qwen3 and other Hermes-style templates write:

  <tool_call>
  {"name": "search", "arguments": {"argument": "dog barks"}}
  </tool_call>

Every environment tool is offered as a function with one string parameter, `argument` (a `ToolCall` carries one
text argument); a call whose `arguments` object holds exactly one string field is read whatever the field's name.
A turn ends at the first closed `</tool_call>`; the environment then writes what the template writes after that
call: the end of the assistant turn, the tool message with the observation, the next generation prompt, and the
template's reply start (Qwen3's empty think block, as the first prompt has it). A turn that ends at EOS without a
call is the final answer (its text; an empty one gives no answer); a `<tool_call>` opened and never closed, or
one whose JSON does not read, is a malformed call the environment answers with an error.

A template without tool support (it ignores the tools or raises on a tool message: Llama 3, Gemma, Mistral,
Phi-3 as shipped) is refused when the format is built; `chat_template_or_tags` falls back to the tag format.
"""

from __future__ import annotations

import json
import re

from prefpipe.common.chat import Conversation, has_chat_template, reply_start, template_turns
from prefpipe.grpo.environments.base import Observation, ToolCall
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, NO_CALL, TurnEnd

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ARGUMENT = "argument"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_PROBE_TEXT = "@@prefpipe-observation@@"
_PROBE_ARGUMENT = "@@prefpipe-argument@@"


class NoToolTemplate(ValueError):
    """The tokenizer's chat template cannot write tool calls and tool messages."""


def tool_schema(name: str) -> dict:
    """The function an environment tool is offered as: one required string parameter `argument`."""
    parameters = {
        "type": "object",
        "properties": {ARGUMENT: {"type": "string", "description": f"the input of {name}"}},
        "required": [ARGUMENT],
    }
    return {
        "type": "function",
        "function": {"name": name, "description": f"the {name} tool", "parameters": parameters},
    }


def _call_message(name: str, argument: str) -> dict:
    call = {"type": "function", "function": {"name": name, "arguments": {ARGUMENT: argument}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def read_call(body: str) -> ToolCall:
    """The call in one `<tool_call>` body: {"name": str, "arguments": {one string field}} (else malformed)."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall("", "", malformed=f"tool call is not JSON ({exc.msg})")
    name = call.get("name") if isinstance(call, dict) else None
    if not isinstance(name, str) or not name:
        return ToolCall("", "", malformed='tool call has no "name"')
    args = call.get("arguments")
    if isinstance(args, str):  # some families write the arguments object as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    values = list(args.values()) if isinstance(args, dict) else []
    if len(values) != 1 or not isinstance(values[0], str):
        return ToolCall(
            name, "", malformed=f'{name}: "arguments" must hold one string, e.g. {{"{ARGUMENT}": "..."}}'
        )
    return ToolCall(name, values[0])


class ChatTemplateFormat:
    """The Hermes tool-call layout through `tokenizer`'s own chat template, offering `tools`."""

    def __init__(self, tokenizer, tools: tuple[str, ...]) -> None:
        self.tokenizer, self.tools = tokenizer, tuple(tools)
        self.schemas = [tool_schema(t) for t in self.tools]
        self.head, self.tail = self._observation_frame()

    def _render(self, messages: list[dict], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.schemas, tokenize=False, add_generation_prompt=generation
        )

    def _observation_frame(self) -> tuple[str, str]:
        """(text before, text after) the observation: what the template writes after a call's `</tool_call>`
        through the next generation prompt (+ reply start), found by rendering a probe call and result."""
        if not has_chat_template(self.tokenizer):
            raise NoToolTemplate("the tokenizer has no chat template")
        from jinja2 import TemplateError

        name = self.tools[0] if self.tools else "tool"
        messages = [
            {"role": "user", "content": "Q"},
            _call_message(name, _PROBE_ARGUMENT),
            {"role": "tool", "content": _PROBE_TEXT},
        ]
        try:
            full = self._render(messages, True)
        except (TemplateError, ValueError, TypeError) as exc:
            raise NoToolTemplate(
                f"its chat template cannot render a tool call and a tool message ({exc})"
            ) from exc
        written = f'{OPEN}\n{{"name": "{name}", "arguments": {{"{ARGUMENT}": "{_PROBE_ARGUMENT}"}}}}\n{CLOSE}'
        before, found, after = full.partition(_PROBE_TEXT)
        if written not in before or not found or _PROBE_TEXT in after:
            raise NoToolTemplate(
                "its chat template does not write tool calls in the <tool_call> JSON layout (it ignores the tools "
                "or the call)"
            )
        return before[before.rindex(CLOSE) + len(CLOSE) :], after + reply_start(self.tokenizer)

    def prompt(self, tokenizer, conversation: Conversation) -> str:
        """The template's rendering of the conversation with the tool schemas, + generation prompt and reply
        start (the text the policy's first turn continues)."""
        turns = template_turns(tokenizer, conversation)
        return self._render(turns, True) + reply_start(tokenizer)

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        closed = _CALL.search(text)
        if closed is not None:
            return TurnEnd(CALL, call=read_call(closed.group(1).strip()))
        if not at_eos:
            return None
        if OPEN in text:
            return TurnEnd(CALL, call=ToolCall("", "", malformed=f"{OPEN} opened, never closed"))
        answer = text.strip()
        return TurnEnd(ANSWER, answer=answer) if answer else TurnEnd(NO_CALL)

    def render(self, observation: Observation) -> str:
        return self.head + observation.text + self.tail

    def instructions(self, tools: tuple[str, ...]) -> str:
        return ""  # the template writes the tool schemas and the call layout into the prompt
