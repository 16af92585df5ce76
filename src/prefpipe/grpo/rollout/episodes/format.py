"""How a policy turn ends and how an environment's result goes back into the episode: a `ToolFormat`.

The documented tag format (`tags`, for a policy family without a tool-call chat format, e.g. a scratch base):

  <search>query</search>        a call to the tool `search` ends the turn (any tool name the environment has,
  <calc>6 * 7</calc>            e.g. `calc`); the first complete `<name>...</name>` in the turn counts
  <answer>text</answer>         ends the episode with `text` as the answer
  \\n<result>...</result>\\n      what the environment appends: the call's observation (an error included)

A turn also ends at EOS. A turn that ends at EOS with a tag it opened and never closed is a malformed call (the
environment answers it like any other call, with an error observation); one with no tag at all ends the episode
without an answer. `<result>` written by the policy itself is an unknown tool (the environment's tag).

A family format (a chat template with tool messages, chat_format.py) implements the same protocol: `prompt`
writes the prompt text, `turn_end` reads the turn's text, `render` writes the observation as the template's tool
message plus the next assistant header, `closers` names the text a call ends with (an engine that cannot read
the turn token by token, vLLM, stops there). tool_formats.py registers them by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from prefpipe.common.chat import Conversation, format_prompt
from prefpipe.grpo.environments.base import Observation, ToolCall

CALL, ANSWER, NO_CALL = "call", "answer", "no_call"
_CLOSED = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)
_OPENED = re.compile(r"<(\w+)>")


@dataclass(frozen=True)
class TurnEnd:
    kind: str  # call | answer | no_call
    call: ToolCall | None = None
    answer: str | None = None


class ToolFormat(Protocol):
    def prompt(self, tokenizer, conversation: Conversation) -> str:
        """The text the policy's first turn continues (the conversation, the generation prompt)."""
        ...

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        """How the turn whose text so far is `text` ends (None: it goes on); `at_eos`: it just wrote EOS."""
        ...

    def render(self, observation: Observation) -> str:
        """The text appended after a call: the observation in the format's result wrapper."""
        ...

    def closers(self) -> tuple[str, ...]:
        """The texts that close a call or an answer before EOS (empty: turns end at EOS only). An engine that
        stops early at them still reads the turn with `turn_end`, which decides."""
        ...

    def instructions(self, tools: tuple[str, ...]) -> str:
        """What a prompt says so the policy knows the format."""
        ...


class TagFormat:
    answer_tag = "answer"
    result_tag = "result"

    def prompt(self, tokenizer, conversation: Conversation) -> str:
        return format_prompt(tokenizer, conversation)  # as every single-turn rollout formats it

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        closed = _CLOSED.search(text)
        if closed is not None:
            name, body = closed.group(1), closed.group(2).strip()
            if name == self.answer_tag:
                return TurnEnd(ANSWER, answer=body)
            return TurnEnd(CALL, call=ToolCall(name, body))
        if not at_eos:
            return None
        opened = _OPENED.search(text)
        if opened is not None:
            why = f"<{opened.group(1)}> opened, never closed (write <name>argument</name>)"
            return TurnEnd(CALL, call=ToolCall(opened.group(1), "", malformed=why))
        return TurnEnd(NO_CALL)

    def render(self, observation: Observation) -> str:
        return f"\n<{self.result_tag}>{observation.text}</{self.result_tag}>\n"

    def closers(self) -> tuple[str, ...]:
        return (">",)  # any </name> closes a call (the answer tag included): its last character

    def instructions(self, tools: tuple[str, ...]) -> str:
        calls = " or ".join(f"<{t}>...</{t}>" for t in tools)
        return (
            f"Call a tool with {calls}; its result comes back in <{self.result_tag}>...</{self.result_tag}>. "
            f"Give the final answer as <{self.answer_tag}>...</{self.answer_tag}>."
        )
