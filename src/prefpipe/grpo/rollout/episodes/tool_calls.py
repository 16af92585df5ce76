"""How a policy family writes a tool call in an assistant turn: the layouts the `chat_template` tool format reads
(chat_format.py picks the one its chat template writes).

| layout     | families (templates as shipped)  | a call                                                     | the turn ends |
|------------|----------------------------------|------------------------------------------------------------|---------------|
| hermes     | Qwen2.5, Qwen3, Hermes-style     | <tool_call>\\n{"name": "search", "arguments": {...}}\\n</tool_call> | at </tool_call> |
| llama_json | Llama 3.1 / 3.2 (JSON tool calls) | {"name": "search", "parameters": {...}} then EOS           | at EOS        |

Every environment tool takes one string, so the arguments object must hold exactly one string field (named
`argument` in the schema offered; another name is read too). A call that does not read (not JSON, no name, other
arguments, a <tool_call> never closed) is a malformed call: the environment answers it with an error. A turn that
ends at EOS without a call is the final answer (its text; an empty one gives none).
"""

from __future__ import annotations

import json
import re

from prefpipe.grpo.environments.base import ToolCall
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, NO_CALL, TurnEnd

ARGUMENT = "argument"


def read_call(body: str, key: str) -> ToolCall:
    """The call in `body`: {"name": str, key: {one string field}} (the object may come as a JSON string)."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall("", "", malformed=f"tool call is not JSON ({exc.msg})")
    name = call.get("name") if isinstance(call, dict) else None
    if not isinstance(name, str) or not name:
        return ToolCall("", "", malformed='tool call has no "name"')
    args = call.get(key)
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    values = list(args.values()) if isinstance(args, dict) else []
    if len(values) != 1 or not isinstance(values[0], str):
        return ToolCall(
            name, "", malformed=f'{name}: "{key}" must hold one string, e.g. {{"{ARGUMENT}": "..."}}'
        )
    return ToolCall(name, values[0])


def _answer(text: str) -> TurnEnd:
    answer = text.strip()
    return TurnEnd(ANSWER, answer=answer) if answer else TurnEnd(NO_CALL)


class Hermes:
    name, ends_at_eos = "hermes", False
    open, close = "<tool_call>", "</tool_call>"
    closers = (close,)
    _call = re.compile(re.escape(open) + r"(.*?)" + re.escape(close), re.DOTALL)

    def written(self, name: str, argument: str) -> str:
        """The call as the template writes it (through the text that ends the policy's turn)."""
        return f'{self.open}\n{{"name": "{name}", "arguments": {{"{ARGUMENT}": "{argument}"}}}}\n{self.close}'

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        closed = self._call.search(text)
        if closed is not None:
            return TurnEnd(CALL, call=read_call(closed.group(1).strip(), "arguments"))
        if not at_eos:
            return None
        if self.open in text:
            return TurnEnd(CALL, call=ToolCall("", "", malformed=f"{self.open} opened, never closed"))
        return _answer(text)


class LlamaJson:
    name, ends_at_eos = "llama_json", True
    closers = ()  # a call turn ends at EOS

    def written(self, name: str, argument: str) -> str:
        return f'{{"name": "{name}", "parameters": {{"{ARGUMENT}": "{argument}"}}}}'

    def turn_end(self, text: str, at_eos: bool) -> TurnEnd | None:
        if not at_eos:
            return None
        body = text.strip()
        return TurnEnd(CALL, call=read_call(body, "parameters")) if body.startswith("{") else _answer(body)


CALL_LAYOUTS = (Hermes(), LlamaJson())
