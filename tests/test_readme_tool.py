"""The README's custom tool (issue #48 acceptance "An environment a user writes"): its code block runs as
written, the tool answers through a runner, and its failures become counted observations."""

from __future__ import annotations

import re
from pathlib import Path

from prefpipe.grpo.environments.base import ENVIRONMENT_ERROR, EnvironmentRunner, ToolCall
from prefpipe.grpo.environments.registry import ENVIRONMENTS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_tool_runs_and_its_failures_are_observations():
    section = README.read_text().split("## A tool of your own", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    scope: dict = {}
    try:
        exec(compile(code, str(README), "exec"), scope)  # the README's own block, as a user would paste it
        runner = EnvironmentRunner(scope["env"], max_result_chars=100)
        runner.reset({"question": "How many metres are 12 km?"})
        assert runner.run(ToolCall("unit", "12 km")).text == "12000 m"
        bad = runner.run(ToolCall("unit", "12 miles"))
        assert bad.kind == ENVIRONMENT_ERROR and bad.text == "error: tool 'unit' failed: KeyError: 'miles'"
        assert runner.run(ToolCall("search", "x")).text == "error: unknown tool 'search'; tools: unit"
        assert dict(runner.counts) == {ENVIRONMENT_ERROR: 1, "unknown_tool": 1}
    finally:
        ENVIRONMENTS.pop("units", None)
