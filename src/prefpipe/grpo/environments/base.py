"""The environment protocol and the runner that runs it inside an episode.

A user's tool is any object with
  tools: tuple[str, ...]            the tool names it answers (the policy writes `<name>argument</name>`)
  reset(row) -> None                called once per episode with the task row (a dict: question, paragraphs, ...)
  step(call: ToolCall) -> str       the tool's result as text
registered with `@register_environment("name")` (grpo/environments/registry.py); see the README's example.

`EnvironmentRunner` wraps one environment for one episode: nothing the policy writes and nothing the tool does
raises out of it. Each failure becomes the observation the policy reads next and is counted by kind:

| kind | when | the observation |
|---|---|---|
| unknown_tool | the call names a tool the environment does not have | `error: unknown tool 'x'; tools: a, b` |
| malformed_call | the turn opened a call it never closed, or the call has no argument | `error: malformed tool call: <why>` |
| environment_error | the environment raised | `error: tool 'x' failed: <ExceptionType>: <message>` |
| empty_result | the tool returned nothing (only whitespace) | `no result` |
| result_cut | the result is longer than max_result_chars | its first max_result_chars characters + ` [cut]` |
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

UNKNOWN_TOOL, MALFORMED_CALL, ENVIRONMENT_ERROR, EMPTY_RESULT, RESULT_CUT = (
    "unknown_tool",
    "malformed_call",
    "environment_error",
    "empty_result",
    "result_cut",
)
ERROR_KINDS = (UNKNOWN_TOOL, MALFORMED_CALL, ENVIRONMENT_ERROR, EMPTY_RESULT, RESULT_CUT)
CUT_MARK = " [cut]"
EMPTY_TEXT = "no result"


@dataclass(frozen=True)
class ToolCall:
    """One call as the policy wrote it: `malformed` says why it could not be read (then name may be empty)."""

    name: str
    argument: str
    malformed: str | None = None


@dataclass(frozen=True)
class Observation:
    text: str  # what goes back to the policy
    kind: str | None = None  # one of ERROR_KINDS, None for a plain result


@runtime_checkable
class Environment(Protocol):
    tools: tuple[str, ...]

    def reset(self, row: Mapping[str, Any]) -> None: ...

    def step(self, call: ToolCall) -> str: ...


@dataclass
class EnvironmentRunner:
    """One environment over one or more episodes; `counts` adds up the failure kinds of every call."""

    environment: Environment
    max_result_chars: int
    counts: Counter = field(default_factory=Counter)
    calls: int = 0

    def reset(self, row: Mapping[str, Any]) -> None:
        self.environment.reset(row)

    def run(self, call: ToolCall) -> Observation:
        """The observation for `call`; never raises for anything the policy or the tool does."""
        self.calls += 1
        tools = tuple(self.environment.tools)
        if call.malformed is not None:
            return self._error(MALFORMED_CALL, f"error: malformed tool call: {call.malformed}")
        if call.name not in tools:
            return self._error(UNKNOWN_TOOL, f"error: unknown tool {call.name!r}; tools: {', '.join(tools)}")
        if not call.argument.strip():
            return self._error(MALFORMED_CALL, f"error: malformed tool call: {call.name} needs an argument")
        try:
            text = str(self.environment.step(call))
        except Exception as exc:  # the tool's failure is the policy's observation, never the run's crash
            return self._error(
                ENVIRONMENT_ERROR, f"error: tool {call.name!r} failed: {type(exc).__name__}: {exc}"
            )
        if not text.strip():
            return self._error(EMPTY_RESULT, EMPTY_TEXT)
        if len(text) > self.max_result_chars:
            return self._error(RESULT_CUT, text[: self.max_result_chars] + CUT_MARK)
        return Observation(text)

    def _error(self, kind: str, text: str) -> Observation:
        self.counts[kind] += 1
        return Observation(text, kind)
