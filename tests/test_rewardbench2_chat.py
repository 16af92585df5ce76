"""RewardBench 2 rows whose prompt is a chat message list (issue 36: conversations end to end): rows in the hub
dataset's shape (id, prompt, chosen/rejected lists, num_correct, num_rejected, total_completions, models, subset)
with a real multi-turn HH-RLHF history as the prompt keep their turns through the loader, are scored on those
turns by a real tiny reward model, and malformed message lists stop the read in one line naming file and row.
Pair files (one chosen, one rejected string) with message-list prompts keep their turns too."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.families import FAMILIES, save_family_model
from support.hh_rows import rows_by_id
from support.models import build_reward

from prefpipe.common.chat import plain_history
from prefpipe.common.io import write_jsonl
from prefpipe.data.hh_transcript import parse_transcript
from prefpipe.evaluation.bench_data import (
    BenchmarkDataError,
    detect_format,
    load_benchmark,
    load_rewardbench2,
)
from prefpipe.evaluation.rewardbench2 import expanded_pairs, score_options

HH_IDS = ("hh-helpful-test-976", "hh-helpful-test-1007")


@pytest.fixture(scope="module")
def hh(shared_data: Path) -> list[dict]:
    return rows_by_id(shared_data / "hh_rlhf_helpful_test.jsonl", HH_IDS)


def _rb2_rows(hh: list[dict]) -> list[dict]:
    """Best-of-4 rows as allenai/reward-bench-2 lays them out, the prompt a message list: two real HH
    histories (one with a system turn first) and a one-turn list; options are real HH replies."""
    replies = [r[k] for r in hh for k in ("chosen", "rejected")]
    system = [{"role": "system", "content": "You are a helpful assistant."}]
    prompts = [
        parse_transcript(hh[0]["prompt"]),
        system + parse_transcript(hh[1]["prompt"]),
        [{"role": "user", "content": "Name a colour."}],
    ]
    return [
        {
            "id": str(i),
            "prompt": prompt,
            "chosen": [replies[i]],
            "rejected": [r for r in replies if r != replies[i]][:3],
            "num_correct": 1,
            "num_rejected": 3,
            "total_completions": 4,
            "models": ["a", "b", "c", "d"],
            "subset": "Focus",
        }
        for i, prompt in enumerate(prompts)
    ]


def test_message_list_prompts_keep_their_turns_and_are_scored_on_them(tmp_path, hh):
    raw = _rb2_rows(hh)
    path = tmp_path / "rb2.jsonl"
    write_jsonl(path, raw)
    rows, report = load_rewardbench2("rb2", str(path), "test", "error")
    assert report["rows_kept"] == 3 and report["dropped"] == {}
    for row, source in zip(rows[:2], raw[:2], strict=True):
        assert row["messages"] == source["prompt"] and row["prompt"] == plain_history(source["prompt"])
        assert row["prompt"].startswith(("Human: ", "System: ")) and "\n\nAssistant: " in row["prompt"]
    assert (
        rows[2]["prompt"] == "Name a colour." and "messages" not in rows[2]
    )  # one user turn: a plain prompt

    base = save_family_model(FAMILIES["gemma2"], tmp_path / "gemma2")
    rm, _ = build_reward(base, "bt", data={"max_length": 192})
    rm.eval()
    scores = score_options(rm, rows, batch_size=4)
    for row, matrix in zip(rows, scores.matrices, strict=True):
        options = row["chosen"] + row["rejected"]
        history = row.get("messages", row["prompt"])
        rewards = rm.encode([history] * 4, options, 4)["reward"].double().numpy()
        assert abs(matrix[0, 1:] - (rewards[0] - rewards[1:])).max() < 1e-5  # S[0, j] = r_0 - r_j
        if "messages" in row:  # the turns are read, not the flattened transcript
            flat = rm.encode([row["prompt"]] * 4, options, 4)["reward"].double().numpy()
            assert abs(flat - rewards).min() > 1e-4
    pairs, _ = expanded_pairs(rows, scores)
    assert all(p.get("messages") == rows[int(p["row_id"])].get("messages") for p in pairs)


@pytest.mark.parametrize(
    ("prompt", "detail"),
    [
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}], "not the user"),
        ([{"role": "tool", "content": "42"}, {"role": "user", "content": "Hi"}], "prompt[0] has role 'tool'"),
        ([{"role": "user", "content": ["Hi"]}], "prompt[0] is not a {'role', 'content'} message"),
        ([], "empty message list"),
    ],
    ids=["ends-on-assistant", "unknown-role", "content-not-text", "empty"],
)
def test_bad_message_list_prompt_is_one_line_naming_file_and_row(tmp_path, hh, prompt, detail):
    raw = _rb2_rows(hh)
    raw[1]["prompt"] = prompt
    path = tmp_path / "rb2.jsonl"
    write_jsonl(path, raw)
    with pytest.raises(BenchmarkDataError) as err:
        load_rewardbench2("rb2", str(path), "test", "error")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"eval.benchmarks.rb2: {path}: row 2: ")
    assert "bad_prompt_messages" in message and detail in message
    rows, report = load_rewardbench2("rb2", str(path), "test", "drop")
    assert [r["id"] for r in rows] == ["0", "2"] and report["dropped"] == {"bad_prompt_messages": 1}
    assert report["rows_in"] == 3 and report["rows_skipped"] == 1


def test_pair_file_with_message_list_prompts_keeps_its_turns(tmp_path, hh):
    """The same chat prompts in a one-chosen / one-rejected file (format rewardbench, auto-detected)."""
    raw = [row | {"chosen": row["chosen"][0], "rejected": row["rejected"][0]} for row in _rb2_rows(hh)]
    path = tmp_path / "pairs.jsonl"
    write_jsonl(path, raw)
    assert detect_format("pairs", str(path), "auto", "test") == "rewardbench"
    rows, report = load_benchmark("pairs", str(path), tmp_path, "test", "error")
    assert report["rows_kept"] == 3
    assert [r.get("messages") for r in rows] == [raw[0]["prompt"], raw[1]["prompt"], None]
    assert rows[2]["prompt"] == "Name a colour."
