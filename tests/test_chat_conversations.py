"""Conversations end to end (issue 36, item 1): real multi-turn HH-RLHF rows become role/content histories, and a
reward input is each family's own chat-template rendering of history + the assistant's reply, checked against
`tokenizer.apply_chat_template` of the whole conversation (text and token ids) for the Llama 3, Qwen2.5, Qwen3,
Gemma 2/3, Mistral and Phi-3 families' own templates (tests/support/families.py names where each comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.families import FAMILIES, family_tokenizer
from transformers import PreTrainedTokenizerFast

from prefpipe.common.chat import (
    conversation,
    format_pair,
    format_pairs,
    format_prompt,
    reply_end,
    reply_start,
)
from prefpipe.common.chat import history as history_of
from prefpipe.common.io import write_jsonl
from prefpipe.data.normalize import normalize_row, parse_transcript
from prefpipe.data.sources import read_pairs as read_source_pairs
from prefpipe.evaluation.bench_data import HELDOUT, load_benchmark
from prefpipe.generation.rl_prompts import load_rl_prompts
from prefpipe.generation.tokens import tokenize_prompts
from prefpipe.reward.collate import PairEncoder
from prefpipe.reward.pairs import read_pairs

# Real rows with at least two human turns (three for the harmless one), roles alternating.
ROWS = {
    "hh_rlhf_helpful_test.jsonl": ("hh-helpful-test-976", "hh-helpful-test-1597"),
    "hh_rlhf_harmless_test.jsonl": ("hh-harmless-test-1918",),
}


def real_pairs(data: Path) -> list[dict]:
    pairs = []
    for name, ids in ROWS.items():
        path = data / name
        wanted = {
            json.loads(line)["id"]: json.loads(line) for line in path.open() if any(i in line for i in ids)
        }
        pairs += [normalize_row(wanted[i], "hh", "hh") for i in ids]
    return pairs


@pytest.fixture(scope="module")
def pairs(shared_data: Path) -> list[dict]:
    return real_pairs(shared_data)


def test_real_hh_rows_keep_their_turns(pairs):
    for pair in pairs:
        turns = pair["messages"]
        assert sum(t["role"] == "user" for t in turns) >= 2
        assert [t["role"] for t in turns] == ["user", "assistant"] * (len(turns) // 2) + ["user"]
        # every turn's text is in the flattened prompt, which stays as it was (ids and overlap checks read it)
        assert all(t["content"] in pair["prompt"] for t in turns)
        assert "Human:" not in "".join(t["content"] for t in turns)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_reward_input_is_the_templates_own_rendering(name, pairs):
    tok = family_tokenizer(FAMILIES[name])
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # as prefpipe.reward.backbone does
    encoder = PairEncoder(tok, max_length=4096, padding_side="right", keep_response="start")
    end = reply_end(tok)
    for pair in pairs:
        history = conversation(pair)
        head = format_prompt(tok, history)
        generation_prompt = tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
        assert head == generation_prompt + reply_start(tok) and bool(reply_start(tok)) == (name == "qwen3")
        # the padded reply: templates that trim a turn (Llama 3, Gemma) render it otherwise than prompt + reply
        responses = (pair["chosen"], pair["rejected"], f" {pair['chosen']}\n")
        rows = encoder.tokenize_batch([history] * len(responses), list(responses))
        for response, row in zip(responses, rows, strict=True):
            full = history + [{"role": "assistant", "content": response}]
            expected = tok.apply_chat_template(full, tokenize=False)
            text = format_pair(tok, history, response)
            # the template's text up to the end of the reply's turn; only whitespace after the turn end is left
            assert text == expected.rstrip() and text.endswith(end)
            assert text.startswith(head)  # the identical prefix both sides of the pair share
            expected_ids = list(tok.apply_chat_template(full, tokenize=True, return_dict=True)["input_ids"])
            assert row.input_ids == expected_ids[: len(row.input_ids)]
            assert tok.decode(expected_ids[len(row.input_ids) :]).strip() == ""
            head_ids = tok(head, add_special_tokens=False)["input_ids"]
            assert row.input_ids[: len(head_ids)] == head_ids and row.prompt_len == len(head_ids)
    if name == "llama":  # a template that writes nothing after the turn end: the whole rendering, exactly
        history = conversation(pairs[0])
        full = history + [{"role": "assistant", "content": pairs[0]["chosen"]}]
        assert format_pair(tok, history, pairs[0]["chosen"]) == tok.apply_chat_template(full, tokenize=False)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_single_turn_inputs_are_the_prompt_part_plus_reply(name):
    """A plain prompt is one user turn, and its reward input is what it was before conversations: the formatted
    prompt + response + the turn end (so single-turn data, like the synthetic run's, reads the same text)."""
    tok = family_tokenizer(FAMILIES[name])
    for prompt, response in (("What is 2 plus 3?", "The answer is 5."), ("Choose a move.", "rock")):
        assert format_pair(tok, prompt, response) == format_prompt(tok, prompt) + response + reply_end(tok)
        as_messages = [{"role": "user", "content": prompt}]
        assert format_pair(tok, as_messages, response) == format_pair(tok, prompt, response)


def test_template_that_renders_history_differently_keeps_a_shared_prefix():
    """A template that writes something before the history only once the reply is there: its rendering would
    not start with the generation prompt, so the input falls back to prompt part + reply + turn end."""
    tok = family_tokenizer(FAMILIES["qwen3"])
    tok.chat_template = (
        "{% if messages[-1]['role'] == 'assistant' %}<|im_start|>system\nanswered<|im_end|>\n{% endif %}"
        + tok.chat_template
    )
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    history.append({"role": "user", "content": "Say yes."})
    heads, texts = format_pairs(tok, [history, history], ["yes", "no"])
    assert heads[0] == heads[1] and all(t.startswith(heads[0]) for t in texts)
    assert texts == [heads[0] + "yes<|im_end|>", heads[0] + "no<|im_end|>"]


def test_plain_form_without_a_template():
    tok = family_tokenizer(FAMILIES["qwen3"])
    tok.chat_template = None
    assert isinstance(tok, PreTrainedTokenizerFast)
    history = parse_transcript("\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Say yes.\n\nAssistant:")
    assert history == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Say yes."},
    ]
    text = format_pair(tok, history, "yes")
    assert text == "Human: Hi\n\nAssistant: Hello!\n\nHuman: Say yes.\n\nyes" + tok.eos_token
    assert format_pair(tok, "Say yes.", "yes") == "Say yes.\n\nyes" + tok.eos_token  # one turn: as before


def test_parse_transcript_refuses_what_is_not_a_human_led_history():
    assert parse_transcript("What is 2+2?") is None
    assert parse_transcript("Human: hi\n\nAssistant: hello") is None  # ends on the assistant: not a history
    assert parse_transcript("Human: hi") == [{"role": "user", "content": "hi"}]
    doubled = parse_transcript("Human: hi\n\nHuman: there?\n\nAssistant: yes\n\nHuman: ok")
    assert [t["role"] for t in doubled] == ["user", "assistant", "user"]  # roles alternate, as templates need
    assert doubled[0]["content"] == "hi\n\nthere?"


def test_every_real_hh_history_alternates(shared_data):
    for name in ("hh_rlhf_helpful_test.jsonl", "hh_rlhf_harmless_test.jsonl", "hh_rlhf_helpful_train.jsonl"):
        for line in (shared_data / name).open():
            turns = parse_transcript(json.loads(line)["prompt"])
            assert turns is not None and turns[0]["role"] == "user" and turns[-1]["role"] == "user"
            assert all(a["role"] != b["role"] for a, b in zip(turns, turns[1:], strict=False))


def test_messages_travel_from_the_source_file_to_reward_inputs_and_benchmarks(shared_data, tmp_path):
    """The data stage's reader on the real HH file, its pairs file, the reward trainer's reader and the
    benchmark loader all keep the turns, and the reward input is still the template's own rendering."""
    hh = shared_data / "hh_rlhf_helpful_test.jsonl"
    rows, _ = read_source_pairs("jsonl", str(hh), "train", "auto", "error", "hh", max_rows=40)
    multi = [r for r in rows if "messages" in r and len(r["messages"]) >= 3]
    assert multi and all(r["messages"] == parse_transcript(r["prompt"]) for r in rows if "messages" in r)
    write_jsonl(tmp_path / "pairs_test.jsonl", rows)
    pairs, _ = read_pairs(tmp_path / "pairs_test.jsonl")
    bench, _ = load_benchmark("hh", HELDOUT, tmp_path, "test", "error")
    tok = family_tokenizer(FAMILIES["gemma2"])
    for pair, row, bench_row in zip(pairs, rows, bench, strict=True):
        assert pair.prompt == conversation(row) and conversation(bench_row) == conversation(row)
        full = history_of(pair.prompt) + [{"role": "assistant", "content": pair.chosen}]
        assert (
            format_pair(tok, pair.prompt, pair.chosen)
            == tok.apply_chat_template(full, tokenize=False).rstrip()
        )


def test_grpo_prompts_keep_their_turns(shared_data, tmp_path):
    """An RL prompt file row with turns (as the data stage writes HH prompts) reaches the policy as the
    template's generation prompt over those turns, not over the flattened transcript."""
    line = next(iter((shared_data / "hh_rlhf_helpful_test.jsonl").open()))
    prompt = json.loads(line)["prompt"]
    row = {"id": "p1", "prompt": prompt, "kind": "none", "messages": parse_transcript(prompt)}
    write_jsonl(tmp_path / "rl.jsonl", [row, {"id": "p2", "prompt": "Say yes.", "kind": "none"}])
    rows, _ = load_rl_prompts(tmp_path / "rl.jsonl")
    assert rows[0]["messages"] == row["messages"] and "messages" not in rows[1]
    tok = family_tokenizer(FAMILIES["llama"])
    tok.pad_token = tok.eos_token
    batch = tokenize_prompts(tok, [conversation(r) for r in rows], None)
    want = tok.apply_chat_template(
        row["messages"], tokenize=True, add_generation_prompt=True, return_dict=True
    )
    got = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    assert got == list(want["input_ids"])


def test_benchmark_rows_with_turns_score_on_the_fast_paths(shared_data, tmp_path):
    """Real HH rows keep their turns into the evaluation; the default fast paths (each distinct conversation +
    reply encoded once) key them by conversation_key (a message list is unhashable) and score as the plain
    paths do."""
    from support.eval_args import evaluate
    from support.families import save_family_model
    from support.models import build_reward

    from prefpipe.evaluation.sections import custom_section_table

    lines = list((shared_data / "hh_rlhf_helpful_test.jsonl").open())[:8]
    rows = [normalize_row(json.loads(line), "hh", "hh") for line in lines]
    rows.append(dict(rows[0], id="again"))  # a repeated conversation + reply: encoded once on the fast paths
    assert sum("messages" in r for r in rows) >= 6
    rm, _ = build_reward(
        save_family_model(FAMILIES["gemma2"], tmp_path / "g"), "gpm", data={"max_length": 96}
    )
    scores = []
    for fast in (True, False):
        frame, summary = evaluate(
            rm.eval().set_fast_paths(fast), rows, custom_section_table({}, "t"), mc_samples=0
        )
        scores.append(frame.sort_values("id")["score_chosen_minus_rejected"].to_numpy())
        assert summary["n_pairs"] == len(rows)
    assert abs(scores[0] - scores[1]).max() < 1e-5 and scores[0].std() > 0


def test_a_system_turn_is_folded_into_the_first_user_turn_where_the_template_refuses_it():
    """Gemma 2's own template (TRL's gemma.jinja) raises on a system turn; prefpipe renders the system text, a
    blank line and the first user turn as one user turn, in the prompt and in the reward input alike. A template
    that takes a system turn (Gemma 3's, Qwen2.5's) gets it unchanged."""
    from jinja2 import TemplateError

    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hey"},
        {"role": "user", "content": "Say yes."},
    ]
    tok = family_tokenizer(FAMILIES["gemma2"])
    with pytest.raises(TemplateError, match="System role not supported"):
        tok.apply_chat_template(history, tokenize=False)
    head = (
        "<bos><start_of_turn>user\nAnswer briefly.\n\nHi<end_of_turn>\n<start_of_turn>model\nHey<end_of_turn>\n"
        "<start_of_turn>user\nSay yes.<end_of_turn>\n<start_of_turn>model\n"
    )  # written out by hand from the template's layout
    assert format_prompt(tok, history) == head
    heads, texts = format_pairs(tok, [history, history], ["yes", "no"])
    assert heads == [head, head] and texts == [head + "yes<end_of_turn>", head + "no<end_of_turn>"]
    for name in ("gemma3", "qwen2"):
        other = family_tokenizer(FAMILIES[name])
        turns = history_of(history)
        assert format_prompt(other, history) == other.apply_chat_template(
            turns, tokenize=False, add_generation_prompt=True
        )
        assert (
            format_pair(other, history, "yes")
            == other.apply_chat_template(
                [*turns, {"role": "assistant", "content": "yes"}], tokenize=False
            ).rstrip()
        )


def test_qwen3s_empty_think_block_belongs_to_the_prompt_text():
    """Qwen3's own template opens a finished reply with an empty think block that its generation prompt lacks;
    prefpipe's prompt text ends with it (what enable_thinking=False writes), so the GRPO policy's prompt ids +
    reply ids are the reward input's ids, and SFT puts no loss on the block."""
    from prefpipe.base.sft import IGNORE, _encode_row

    tok = family_tokenizer(FAMILIES["qwen3"])
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    history.append({"role": "user", "content": "Say yes."})
    head = (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHey<|im_end|>\n"
        "<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )  # written out by hand from the template's layout
    finished = tok.apply_chat_template([*history, {"role": "assistant", "content": "yes"}], tokenize=False)
    assert finished == head + "yes<|im_end|>\n"  # the template's own finished turn
    assert format_prompt(tok, history) == head
    no_thinking = tok.apply_chat_template(
        history, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert no_thinking == head
    heads, texts = format_pairs(tok, [history, history], ["yes", "no"])
    assert heads == [head, head] and texts == [head + "yes<|im_end|>", head + "no<|im_end|>"]
    batch = tokenize_prompts(tok, [history], None)
    policy_ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    reply_ids = tok("yes<|im_end|>", add_special_tokens=False)["input_ids"]
    encoder = PairEncoder(tok, max_length=4096, padding_side="right", keep_response="start")
    (row,) = encoder.tokenize_batch([history], ["yes"])
    assert row.input_ids == policy_ids + reply_ids and row.prompt_len == len(policy_ids)
    ids, labels = _encode_row(tok, {"prompt": history, "response": "yes"}, 0)
    assert ids == policy_ids + reply_ids and labels == [IGNORE] * len(policy_ids) + reply_ids


def test_mistral_gets_its_system_turn_folded_and_repeated_turns_joined():
    """Mistral's own template (Mistral-7B-Instruct-v0.1's) raises on a system turn and on two user turns in a
    row; prefpipe folds the system text into the first user turn and joins the repeated turns, in the prompt
    and the reward input alike."""
    from jinja2 import TemplateError

    tok = family_tokenizer(FAMILIES["mistral"])
    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hey"},
        {"role": "user", "content": "Say yes."},
        {"role": "user", "content": "Now."},
    ]
    for refused in (history[:4], history[1:]):  # a system turn; two user turns in a row
        with pytest.raises(TemplateError, match="Conversation roles must alternate"):
            tok.apply_chat_template(refused, tokenize=False)
    head = "<s>[INST] Answer briefly.\n\nHi [/INST]Hey</s> [INST] Say yes.\n\nNow. [/INST]"  # by hand
    assert format_prompt(tok, history) == head and reply_start(tok) == "" and reply_end(tok) == "</s>"
    heads, texts = format_pairs(tok, [history, history], ["yes", "no"])
    assert heads == [head, head] and texts == [head + "yes</s>", head + "no</s>"]
    assert format_pair(tok, "Say yes.", "yes") == "<s>[INST] Say yes. [/INST]yes</s>"
    qwen2 = family_tokenizer(FAMILIES["qwen2"])  # a template that takes both keeps the turns as they are
    want = qwen2.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert format_prompt(qwen2, history) == want and "Say yes.<|im_end|>\n<|im_start|>user\nNow." in want
