"""The policy family's own tool-call format (`chat_template`): the tokenizer's chat template writes the tool
schemas into the prompt, the policy calls a tool the way its family does (tool_calls.py: Hermes <tool_call> JSON
for Qwen2.5 / Qwen3, Llama 3.1's JSON calls), and the result goes back as the template's tool message.

Every environment tool is offered as a function with one string parameter, `argument` (a `ToolCall` carries one
text argument). After a call the environment writes exactly what the template writes after that call, rendered
with the observation: the end of the assistant turn (for a layout that ends at EOS, the policy wrote that token
itself), the tool message, the next generation prompt, and the template's reply start (Qwen3's empty think block,
as the first prompt has it). Whatever the template does to the text is kept (Llama 3.1's writes a tool result as
a JSON string, quotes included).

A template without tool support (it ignores the tools or the call, or raises on a tool message: Llama 3, Gemma,
Mistral, Phi-3 as shipped) is refused when the format is built; `chat_template_or_tags` falls back to the tags.
"""

from __future__ import annotations

from prefpipe.common.chat import Conversation, has_chat_template, reply_start, template_turns
from prefpipe.grpo.environments.base import Observation
from prefpipe.grpo.rollout.episodes.format import TurnEnd
from prefpipe.grpo.rollout.episodes.tool_calls import ARGUMENT, CALL_LAYOUTS

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


class ChatTemplateFormat:
    """The family's tool calls through `tokenizer`'s own chat template, offering `tools`."""

    def __init__(self, tokenizer, tools: tuple[str, ...]) -> None:
        if not has_chat_template(tokenizer):
            raise NoToolTemplate("the tokenizer has no chat template")
        self.tokenizer, self.tools = tokenizer, tuple(tools)
        self.schemas = [tool_schema(t) for t in self.tools]
        self._tool = self.tools[0] if self.tools else "tool"
        self.layout = self._detect()

    def _render(self, messages: list[dict], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.schemas, tokenize=False, add_generation_prompt=generation
        )

    def _answered(self, text: str) -> str:
        """A probe conversation: a question, a call, `text` as the tool message, the next generation prompt."""
        messages = [
            {"role": "user", "content": "Q"},
            _call_message(self._tool, _PROBE_ARGUMENT),
            {"role": "tool", "content": text},
        ]
        return self._render(messages, True)

    def _detect(self):
        """The call layout the template writes (CALL_LAYOUTS, first match), checked on a probe conversation."""
        from jinja2 import TemplateError

        try:
            full = self._answered(_PROBE_TEXT)
        except (TemplateError, ValueError, TypeError) as exc:
            raise NoToolTemplate(
                f"its chat template cannot render a tool call and a tool message ({exc})"
            ) from exc
        before, found, after = full.partition(_PROBE_TEXT)
        for layout in CALL_LAYOUTS if found and _PROBE_TEXT not in after else ():
            if layout.written(self._tool, _PROBE_ARGUMENT) in before:
                self._after_call(full, layout)
                return layout
        layouts = ", ".join(layout.name for layout in CALL_LAYOUTS)
        raise NoToolTemplate(f"its chat template writes no tool call in a layout read here ({layouts})")

    def _after_call(self, full: str, layout) -> str:
        """What `full` writes after the probe call, less the EOS token the policy ends such a turn with."""
        written = layout.written(self._tool, _PROBE_ARGUMENT)
        rest = full[full.index(written) + len(written) :]
        if layout.ends_at_eos:
            eos = self.tokenizer.eos_token or ""
            if not eos or not rest.startswith(eos):
                raise NoToolTemplate(f"its chat template does not end a call turn with the EOS token {eos!r}")
            rest = rest[len(eos) :]
        return rest + reply_start(self.tokenizer)

    def prompt(self, tokenizer, conversation: Conversation) -> str:
        """The template's rendering of the conversation with the tool schemas, + generation prompt and reply
        start (the text the policy's first turn continues)."""
        turns = template_turns(tokenizer, conversation)
        return self._render(turns, True) + reply_start(tokenizer)

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        return self.layout.turn_end(text, at_eos)

    def render(self, observation: Observation) -> str:
        return self._after_call(self._answered(observation.text), self.layout)

    def closers(self) -> tuple[str, ...]:
        return self.layout.closers

    def instructions(self, tools: tuple[str, ...]) -> str:
        return ""  # the template writes the tool schemas and the call layout into the prompt
