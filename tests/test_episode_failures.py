"""Bad tool calls and environment failures through a real episode rollout: each case runs the trainer's step
(EpisodeSteps.step: the batched decode, the environment runner, the step's episode metrics) with a scripted
policy (tests/support/scripted_policy.py) over a user environment (tests/support/episodes.py Flaky) that echoes,
raises, returns nothing or floods on demand. Each case asserts the observation the policy reads, the counter in the step's metrics, and that the
episode goes on (the policy's next turn answers) or, for a result past the context, that the episode ends at the
token budget while the batch's other episodes answer. docs/reference/CONFIGURATION.md's failure table lists these
cases and the test behind each row."""

from __future__ import annotations

import pytest
import torch
from support.episodes import Flaky
from support.families import FAMILIES, family_tokenizer
from support.models import chat_tokenizer, tiny_llama
from support.scripted_policy import ScriptedPolicy
from support.settings import grpo_settings

from prefpipe.grpo.environments.base import ERROR_KINDS, MALFORMED_CALL, UNKNOWN_TOOL
from prefpipe.grpo.environments.registry import ENVIRONMENTS, register_environment
from prefpipe.grpo.metric_names import EPISODE_ANSWERED, EPISODE_CONTEXT_CUT, EPISODE_ENV_ERRORS
from prefpipe.grpo.rollout.episodes.episode import ANSWERED, ENVIRONMENT, POLICY, TOKEN_LIMIT
from prefpipe.grpo.training.episode_steps import EpisodeSteps

G = 2
QUESTION = "Which animal barks?"


@pytest.fixture(autouse=True, scope="module")
def faulty():
    register_environment("faulty")(lambda options: Flaky(("search",)))
    yield
    ENVIRONMENTS.pop("faulty")


def steps(tool_format: str, tokenizer, max_result_chars: int, max_episode_tokens: int) -> EpisodeSteps:
    episodes = {"enabled": True, "environment": "faulty", "options": {"faulty": {}}, "tool_format": tool_format,
                "max_turns": 3, "max_turn_tokens": 100, "max_episode_tokens": max_episode_tokens,
                "max_result_chars": max_result_chars}  # fmt: skip
    overrides = {"num_generations": G, "max_prompt_length": 1024, "episodes": episodes}  # tools block
    settings = grpo_settings(overrides, run="multi")
    return EpisodeSteps(settings, tokenizer)


def run_step(ep_steps: EpisodeSteps, tok, scripts: dict[str, list[tuple[str, str]]]):
    """(rollout, answers, metrics, episodes) of one step over `scripts` ({question: [(owner, text)]}): the
    policy writes the policy pieces (a piece ending in EOS gets the EOS token), expecting the environment
    pieces; the environment and the format are the run's own."""
    rows = [{"id": f"q{i}", "prompt": q, "answer": "dog"} for i, q in enumerate(scripts)]
    prompts, expected = [], []
    for row, parts in zip(rows, scripts.values(), strict=True):
        prompts.append(tok.encode(ep_steps.fmt.prompt(tok, row["prompt"]), add_special_tokens=False))
        ids = []
        for _, text in parts:
            ids += tok.encode(text, add_special_tokens=False)
        expected.append(ids)
    torch.manual_seed(0)
    policy = ScriptedPolicy(tiny_llama(tok), prompts, expected, tok.eos_token_id)
    rollout, answers, metrics = ep_steps.step(policy, tok, rows, None)
    return rollout, answers, metrics, ep_steps.episodes


def tag_script(call: str, observation: str) -> list[tuple[str, str]]:
    return [
        (POLICY, call),
        (ENVIRONMENT, f"\n<result>{observation}</result>\n"),
        (POLICY, "<answer>dog</answer>"),
    ]


# (case, the policy's call, the observation it reads, the failure kind counted)
TAG_CASES = [
    ("malformed call: a tag never closed", "<search>dog<eos>",
     "error: malformed tool call: <search> opened, never closed (write <name>argument</name>)", MALFORMED_CALL),
    ("malformed call: no argument", "<search> </search>", "error: malformed tool call: search needs an argument",
     MALFORMED_CALL),
    ("unknown tool", "<lookup>dog</lookup>", "error: unknown tool 'lookup'; tools: search", UNKNOWN_TOOL),
    ("the environment raises", "<search>boom</search>",
     "error: tool 'search' failed: RuntimeError: the tool broke", "environment_error"),
    ("empty result", "<search>blank</search>", "no result", "empty_result"),
    ("result longer than max_result_chars", "<search>long</search>", "x" * 20 + " [cut]", "result_cut"),
]  # fmt: skip


def check_failure(tok, out, observation: str, kind: str) -> None:
    """Every episode read `observation`, counted once as `kind`, and went on to answer."""
    rollout, answers, metrics, episodes = out
    for ep in episodes:
        assert [o.text for o in ep.observations] == [observation]
        assert [o.kind for o in ep.observations] == [kind]
        assert ep.finish == ANSWERED and [s.owner for s in ep.segments] == [POLICY, ENVIRONMENT, POLICY]
    for k in ERROR_KINDS:  # per episode: one failure of this kind, none of the others
        assert metrics[EPISODE_ENV_ERRORS.format(kind=k)] == (1.0 if k == kind else 0.0), k
    assert answers == ["dog"] * G and metrics[EPISODE_ANSWERED] == 1.0
    assert rollout.completion_ids.shape[0] == G and not rollout.truncated.any()


@pytest.mark.parametrize(("case", "call", "observation", "kind"), TAG_CASES, ids=[c[0] for c in TAG_CASES])
def test_a_bad_call_or_a_failing_tool_is_an_observation_and_the_episode_goes_on(
    case, call, observation, kind
):
    tok = chat_tokenizer()
    out = run_step(steps("tags", tok, 20, 400), tok, {QUESTION: tag_script(call, observation)})
    check_failure(tok, out, observation, kind)


def test_a_malformed_call_in_the_familys_format_is_an_observation_and_the_episode_goes_on():
    """chat_template on Qwen2.5's template: a <tool_call> whose JSON does not read."""
    tok = family_tokenizer(FAMILIES["qwen2"])
    observation = "error: malformed tool call: tool call is not JSON (Expecting value)"
    tool = (
        f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    call = '<tool_call>\n{"name": "search", "arguments": {"argument": }}\n</tool_call>'
    script = [(POLICY, call), (ENVIRONMENT, tool), (POLICY, "dog<|im_end|>")]
    out = run_step(steps("chat_template", tok, 20, 400), tok, {QUESTION: script})
    check_failure(tok, out, observation, MALFORMED_CALL)


def test_a_result_longer_than_the_context_is_cut_and_ends_that_episode_only():
    """max_episode_tokens smaller than the call + its result: the result is cut to the budget (H04), the episode
    ends at the token limit, counted in episode/context_cut_rate; the other question's episodes answer."""
    tok = chat_tokenizer()
    call, good = "<search>long</search>", "<search>dog</search>"
    budget = len(tok.encode(call + "\n<result>" + "x" * 100, add_special_tokens=False)) - 10
    scripts = {
        QUESTION: tag_script(call, "x" * 100),
        "Where do birds fly?": tag_script(good, "dog"),
    }
    rollout, answers, metrics, episodes = run_step(steps("tags", tok, 400, budget), tok, scripts)
    flooded, answered = episodes[:G], episodes[G:]
    for ep in flooded:
        assert ep.finish == TOKEN_LIMIT and ep.context_cut > 0 and len(ep.ids) == budget
        assert ep.observations[0].text == "x" * 100 and ep.observations[0].kind is None
        assert ep.owners[-1] == ENVIRONMENT
    for ep in answered:
        assert ep.finish == ANSWERED and ep.observations[0].text == "dog"
    assert answers == [""] * G + ["dog"] * G
    assert metrics[EPISODE_CONTEXT_CUT] == 0.5 and metrics[EPISODE_ANSWERED] == 0.5
    assert rollout.truncated.tolist() == [True] * G + [False] * G
