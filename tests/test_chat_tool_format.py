"""The family's own tool-call format (tool_format: chat_template, grpo/rollout/episodes/chat_format.py) through
the families' real chat templates (TRL's shipped Qwen2.5, Qwen3 and Llama 3.1 templates, tests/support/families.py): the
prompt with the tool schemas, a policy turn that calls the tool, the tool message, the next policy turn, each
against a hand-written string; the episode's segments token by token; the loss mask; and the refusal of a
template without tool support."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support.episode_grads import G, logit_grads
from support.episodes import PARAGRAPHS, runner
from support.families import FAMILIES, LLAMA3_1, family_config, family_tokenizer
from support.scripted_policy import ScriptedPolicy
from support.settings import grpo_settings
from transformers import AutoModelForCausalLM

from prefpipe.common.config import ConfigError
from prefpipe.grpo.environments.base import ToolCall
from prefpipe.grpo.rollout.episodes.chat_format import ChatTemplateFormat
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.episode import ANSWERED, ENVIRONMENT, POLICY
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, NO_CALL, TagFormat, TurnEnd
from prefpipe.grpo.rollout.episodes.generate import generate_episodes
from prefpipe.grpo.rollout.episodes.tool_formats import build_tool_format

KEY = "grpo.multi.episodes.tool_format"
SCHEMA = (
    '{"type": "function", "function": {"name": "search", "description": "the search tool", "parameters": '
    '{"type": "object", "properties": {"argument": {"type": "string", "description": "the input of search"}}, '
    '"required": ["argument"]}}}'
)
TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    f"function signatures within <tools></tools> XML tags:\n<tools>\n{SCHEMA}\n</tools>\n\nFor each function "
    "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
THINK = "<think>\n\n</think>\n\n"  # Qwen3's non-thinking reply start, after every generation prompt
# per family: the system block with the tools, and what follows each generation prompt
LAYOUT = {
    "qwen2": (f"<|im_start|>system\n{QWEN_SYSTEM}\n\n{TOOLS_BLOCK}", ""),
    "qwen3": (f"<|im_start|>system\n{TOOLS_BLOCK}", THINK),
}
# (question, the search query the policy writes, the search result, the answer)
SCRIPTS = [
    ("Which animal barks?", "dog barks", "[1] Dogs: A dog barks in the park.", "dog"),
    ("Where do birds fly?", "birds fly", "[1] Birds: Birds fly over the river.", "river"),
]
ROWS = [{"prompt": q, "paragraphs": PARAGRAPHS} for q, *_ in SCRIPTS]


# Llama 3.1: the tools go into the first user turn (its tools_in_user_message default), the schema as
# tojson(indent=4) writes it, a call is bare JSON with "parameters" ending at <|eot_id|>, a result comes back as an
# ipython turn holding the result as a JSON string
LLAMA_HEAD = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
    "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Given the following functions, please respond with a JSON for a function call with its proper arguments "
    'that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
    "dictionary of argument name and its value}.Do not use variables.\n\n"
)
LLAMA_SCHEMA = """{
    "type": "function",
    "function": {
        "name": "search",
        "description": "the search tool",
        "parameters": {
            "type": "object",
            "properties": {
                "argument": {
                    "type": "string",
                    "description": "the input of search"
                }
            },
            "required": [
                "argument"
            ]
        }
    }
}"""
LLAMA_ASSISTANT = "<|start_header_id|>assistant<|end_header_id|>\n\n"


def family_of(family: str):
    """The test family: llama3_1 is the Llama family with Llama 3.1's template."""
    return replace(FAMILIES["llama"], template=LLAMA3_1) if family == "llama3_1" else FAMILIES[family]


def llama_pieces(script: tuple[str, str, str, str]) -> tuple[str, list[tuple[str, str]]]:
    question, query, result, answer = script
    prompt = f"{LLAMA_HEAD}{LLAMA_SCHEMA}\n\n{question}<|eot_id|>{LLAMA_ASSISTANT}"
    call = f'{{"name": "search", "parameters": {{"argument": "{query}"}}}}<|eot_id|>'
    tool = f'<|start_header_id|>ipython<|end_header_id|>\n\n"{result}"<|eot_id|>{LLAMA_ASSISTANT}'
    return prompt, [(POLICY, call), (ENVIRONMENT, tool), (POLICY, f"{answer}<|eot_id|>")]


def pieces(family: str, script: tuple[str, str, str, str]) -> tuple[str, list[tuple[str, str]]]:
    """(prompt text, [(owner, text)] of the episode after it), written out by hand for the family's template."""
    if family == "llama3_1":
        return llama_pieces(script)
    system, start = LAYOUT[family]
    question, query, result, answer = script
    prompt = f"{system}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{start}"
    call = f'<tool_call>\n{{"name": "search", "arguments": {{"argument": "{query}"}}}}\n</tool_call>'
    tool = (
        f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n"
        f"<|im_start|>assistant\n{start}"
    )
    return prompt, [(POLICY, call), (ENVIRONMENT, tool), (POLICY, f"{answer}<|im_end|>")]


def scripted_run(family: str):
    """(tokenizer, the tiny model under the script, the episode batch): 2 prompts x G greedy episodes, each
    row scripted to call the search tool, read the result and answer."""
    tok = family_tokenizer(family_of(family))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(family_config(family_of(family), tok)).eval()
    fmt = build_tool_format("chat_template", tok, ("search",), KEY)
    prompts, scripts = [], []
    for script in SCRIPTS:
        prompt, parts = pieces(family, script)
        prompts.append(tok.encode(prompt, add_special_tokens=False))
        scripts.append([t for _, text in parts for t in tok.encode(text, add_special_tokens=False)])
    policy = ScriptedPolicy(model, prompts, scripts, tok.eos_token_id)
    limits = EpisodeLimits(max_turns=3, max_turn_tokens=120, max_episode_tokens=400)
    out = generate_episodes(
        policy, tok, ROWS, [r["prompt"] for r in ROWS], G, runner, fmt, limits, Sampling(None, 1.0, 0, 1.0)
    )
    return tok, model, out


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama3_1"])
def test_an_episode_through_the_familys_template_matches_the_hand_written_turns(family):
    tok, _, out = scripted_run(family)
    ro = out.rollout
    for row, ep in enumerate(out.episodes):
        prompt, parts = pieces(family, SCRIPTS[row // G])
        prompt_ids = ro.prompt_ids[row][ro.prompt_mask[row].bool()].tolist()
        assert tok.decode(prompt_ids) == prompt  # the template's prompt with the tool schema
        assert [s.owner for s in ep.segments] == [p[0] for p in parts]
        for seg, (owner, text) in zip(ep.segments, parts, strict=True):  # each turn, token for token
            assert tok.decode(ep.ids[seg.start : seg.end]) == text, (row, owner)
            assert ep.ids[seg.start : seg.end] == tok.encode(text, add_special_tokens=False)
        assert ep.calls == [ToolCall("search", SCRIPTS[row // G][1])]
        assert ep.finish == ANSWERED and ep.answer == SCRIPTS[row // G][3]
        assert ro.env_mask[row, : len(ep.ids)].tolist() == [int(o == POLICY) for o in ep.owners]
        assert ro.loss_mask[row, len(ep.ids) :].sum() == 0


@pytest.mark.parametrize(("family", "after"), [("qwen2", "\n"), ("llama3_1", "")])
def test_the_episode_is_the_templates_own_rendering_of_the_conversation(family, after):
    """Qwen2.5's and Llama 3.1's templates render the finished conversation (call, tool message, answer) as the
    episode's text exactly, + what Qwen writes after a finished turn (Qwen3's drops the empty think block from a
    non-final turn, so it has only the hand-written check)."""
    tok, _, out = scripted_run(family)
    question, query, result, answer = SCRIPTS[0]
    call = {"type": "function", "function": {"name": "search", "arguments": {"argument": query}}}
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": answer},
    ]
    fmt = ChatTemplateFormat(tok, ("search",))
    whole = tok.apply_chat_template(messages, tools=fmt.schemas, tokenize=False)
    ro, ep = out.rollout, out.episodes[0]
    prompt_ids = ro.prompt_ids[0][ro.prompt_mask[0].bool()].tolist()
    assert tok.decode(prompt_ids + ep.ids) + after == whole


@pytest.mark.parametrize("family", ["qwen2", "llama3_1"])
def test_only_the_policys_tokens_get_a_gradient_through_the_template(family):
    tok, model, out = scripted_run(family)
    torch.manual_seed(1)
    reference = AutoModelForCausalLM.from_config(family_config(family_of(family), tok))
    grads = logit_grads(model.train(), reference, out.rollout, "completion", 4)
    seen = {POLICY: 0, ENVIRONMENT: 0}
    for row, ep in enumerate(out.episodes):  # brute force over every token of every episode
        for j, owner in enumerate(ep.owners):
            seen[owner] += 1
            nonzero = torch.count_nonzero(grads[(row, j)]) > 0
            assert nonzero == (owner == POLICY), f"row {row} token {j} ({owner})"
    assert seen[POLICY] > 40 and seen[ENVIRONMENT] > 40


def test_hermes_calls_answers_and_malformed_turns_are_read():
    fmt = ChatTemplateFormat(family_tokenizer(FAMILIES["qwen2"]), ("search",))
    assert fmt.turn_end('<tool_call>\n{"name": "search", "arg', at_eos=False) is None
    end = fmt.turn_end(
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"q": "x y"}}\n</tool_call>', False
    )
    assert (end.kind, end.call) == (CALL, ToolCall("search", "x y"))
    as_string = '<tool_call>{"name": "calc", "arguments": "{\\"argument\\": \\"1+2\\"}"}</tool_call>'
    assert fmt.turn_end(as_string, False).call == ToolCall("calc", "1+2")
    bad = {
        "<tool_call>{name: search}</tool_call>": "tool call is not JSON",
        '<tool_call>{"arguments": {"argument": "x"}}</tool_call>': 'tool call has no "name"',
        '<tool_call>{"name": "search", "arguments": {"a": "x", "b": "y"}}</tool_call>': '"arguments" must hold',
        '<tool_call>{"name": "search", "arguments": {"argument": 3}}</tool_call>': '"arguments" must hold',
    }
    for text, why in bad.items():
        got = fmt.turn_end(text, at_eos=False)
        assert got.kind == CALL and why in got.call.malformed, text
    assert "never closed" in fmt.turn_end('<tool_call>{"name": "search"', at_eos=True).call.malformed
    assert fmt.turn_end(" Paris ", at_eos=True) == fmt.turn_end("Paris", at_eos=True)
    assert (
        fmt.turn_end("Paris", at_eos=True).kind == ANSWER and fmt.turn_end("  ", at_eos=True).kind == NO_CALL
    )


def test_llama_json_calls_answers_and_malformed_turns_are_read():
    fmt = ChatTemplateFormat(family_tokenizer(family_of("llama3_1")), ("search",))
    assert fmt.layout.name == "llama_json"
    assert fmt.turn_end('{"name": "search", "parameters": {"argument": "x"}}', at_eos=False) is None
    call = fmt.turn_end(' {"name": "search", "parameters": {"query": "x y"}} ', at_eos=True)
    assert (call.kind, call.call) == (CALL, ToolCall("search", "x y"))
    assert (
        "tool call is not JSON"
        in fmt.turn_end('{"name": "search", "parameters": ', at_eos=True).call.malformed
    )
    bad_key = fmt.turn_end('{"name": "search", "arguments": {"argument": "x"}}', at_eos=True).call.malformed
    assert '"parameters" must hold one string' in bad_key
    assert fmt.turn_end(" the dog\n", at_eos=True) == TurnEnd(ANSWER, answer="the dog")
    assert fmt.turn_end(" ", at_eos=True).kind == NO_CALL


@pytest.mark.parametrize("family", ["llama", "gemma2", "gemma3", "mistral", "phi3"])
def test_a_template_without_tool_support_is_refused_naming_the_key_or_falls_back_to_tags(family):
    tok = family_tokenizer(FAMILIES[family])
    with pytest.raises(
        ValueError, match=rf"{KEY}: chat_template needs a chat template that writes tool calls"
    ):
        build_tool_format("chat_template", tok, ("search",), KEY)
    assert isinstance(build_tool_format("chat_template_or_tags", tok, ("search",), KEY), TagFormat)


def test_the_trainer_refuses_it_when_it_builds_the_run_s_episodes():
    from prefpipe.grpo.training.episode_steps import EpisodeSteps

    episodes = {"enabled": True, "options": {"search": {"top_k": 1}}, "tool_format": "chat_template"}
    settings = grpo_settings({"episodes": episodes}, run="multi")
    assert isinstance(EpisodeSteps(settings, family_tokenizer(FAMILIES["qwen3"])).fmt, ChatTemplateFormat)
    with pytest.raises((ValueError, ConfigError), match=KEY):
        EpisodeSteps(settings, family_tokenizer(FAMILIES["llama"]))


@pytest.mark.parametrize("family", ["tags", "qwen2", "qwen3", "llama3_1"])
def test_the_token_that_closes_a_call_is_one_the_vllm_engine_stops_at(family):
    """The vLLM engine stops at the tokens holding the last character of the format's closers
    (engines/vllm_episodes.py); the token at which `turn_end` first ends a written call must be one of them
    (else vLLM would write past the call before the turn is read), and a format whose calls end at EOS has none."""
    from prefpipe.grpo.rollout.engines.vllm_episodes import closing_token_ids

    if family == "tags":
        from support.models import chat_tokenizer

        tok, fmt = chat_tokenizer(), TagFormat()
        texts = ["<search>dog barks</search>", "I think <answer>river</answer>", "<lookup>x</lookup> more"]
    else:
        tok = family_tokenizer(family_of(family))
        fmt = ChatTemplateFormat(tok, ("search",))
        texts = ["Let me look.\n" + fmt.layout.written("search", "dog barks") + "\nmore"]
    stops = set(closing_token_ids(tok, fmt.closers()))
    if family == "llama3_1":
        assert fmt.closers() == () and stops == set()  # a call turn ends at EOS
        return
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        ends = [k for k in range(len(ids)) if fmt.turn_end(tok.decode(ids[: k + 1]), False) is not None]
        assert ends and ids[ends[0]] in stops, (text, ids, ends)
