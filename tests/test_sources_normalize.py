"""Row-level normalisation: transcript splitting, message lists, bad-row reasons, ids, format detection."""

from __future__ import annotations

import hashlib
import json

import pytest

from prefpipe.data.normalize import (
    BadRow,
    RawRecord,
    content_id,
    detect_format,
    history_to_prompt,
    make_ids_unique,
    normalize_records,
    normalize_row,
    split_transcript,
)

MULTI_TURN = (
    "\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: And times 3?\n\nAssistant: Do you mean (2+2)*3?"
    "\n\nHuman: Yes."
)


def hh(transcript_prefix: str, reply: str) -> str:
    return f"{transcript_prefix}\n\nAssistant: {reply}"


def reason_of(row, fmt: str) -> str:
    with pytest.raises(BadRow) as info:
        normalize_row(row, fmt, "default")
    return info.value.reason


def test_split_transcript_cuts_at_the_last_assistant_turn():
    prompt, reply = split_transcript(hh(MULTI_TURN, "It is 12.\n\nAnything else?"))
    assert prompt == MULTI_TURN.removeprefix("\n\n")
    assert prompt.startswith("Human: What is 2+2?") and prompt.endswith("Human: Yes.")
    assert "Assistant: Do you mean (2+2)*3?" in prompt  # earlier assistant turns stay in the prompt
    assert reply == "It is 12.\n\nAnything else?"
    # only the one space after "Assistant:" goes; the reply's own whitespace is data and stays
    assert split_transcript("\n\nHuman: a\n\nAssistant:  b\n") == ("Human: a", " b\n")


def test_hh_row_splits_both_transcripts_and_keeps_the_shared_prompt():
    row = {"chosen": hh(MULTI_TURN, "12."), "rejected": hh(MULTI_TURN, "I don't know."), "subset": "math"}
    pair = normalize_row(row, "hh", "default")
    assert pair["prompt"] == MULTI_TURN.strip()
    assert pair["messages"] == msgs(
        ("user", "What is 2+2?"), ("assistant", "4."), ("user", "And times 3?"),
        ("assistant", "Do you mean (2+2)*3?"), ("user", "Yes."),
    )  # fmt: skip
    assert (pair["chosen"], pair["rejected"], pair["subset"]) == ("12.", "I don't know.", "math")


def test_hh_format_accepts_rows_that_are_already_split():
    row = {"prompt": "Human: hi", "chosen": "hello", "rejected": "go away", "id": 7}
    assert normalize_row(row, "hh", "hh-set") == {
        "id": "7",
        "prompt": "Human: hi",
        "chosen": "hello",
        "rejected": "go away",
        "subset": "hh-set",
        "messages": [{"role": "user", "content": "hi"}],  # the transcript's one human turn, without its label
    }


def test_hh_prompt_mismatch_and_missing_assistant_turn():
    mismatch = {"chosen": hh("\n\nHuman: hi", "a"), "rejected": hh("\n\nHuman: hey", "b")}
    assert reason_of(mismatch, "hh") == "prompt_mismatch"
    no_turn = {"chosen": hh("\n\nHuman: hi", "a"), "rejected": "\n\nHuman: hi and nothing else"}
    assert reason_of(no_turn, "hh") == "unrecognised_shape"
    empty_reply = {"chosen": "\n\nHuman: hi\n\nAssistant:", "rejected": hh("\n\nHuman: hi", "b")}
    assert reason_of(empty_reply, "hh") == "empty_field"


def msgs(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": content} for role, content in turns]


def test_messages_single_user_turn_is_the_prompt():
    row = {
        "chosen": msgs(("user", "Name a colour."), ("assistant", "Blue.")),
        "rejected": msgs(("user", "Name a colour."), ("assistant", "Seven.")),
    }
    pair = normalize_row(row, "messages", "sky")
    assert "messages" not in pair  # one plain user turn: the prompt says it all (files read as before)
    assert (pair["prompt"], pair["chosen"], pair["rejected"], pair["subset"]) == (
        "Name a colour.",
        "Blue.",
        "Seven.",
        "sky",
    )


def test_messages_multi_turn_history_becomes_a_transcript():
    history = (
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Capital of France?"),
    )
    row = {
        "chosen": msgs(*history, ("assistant", "Paris.")),
        "rejected": msgs(*history, ("assistant", "Rome.")),
    }
    pair = normalize_row(row, "messages", "default")
    expected = "System: Be brief.\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Capital of France?"
    assert pair["prompt"] == expected
    assert pair["messages"] == msgs(*history)  # the history itself, for the chat template
    assert history_to_prompt([("user", "only")]) == "only"
    assert (pair["chosen"], pair["rejected"]) == ("Paris.", "Rome.")


def test_messages_reply_only_lists_take_the_prompt_field():
    row = {"prompt": "Q?", "chosen": msgs(("assistant", "A")), "rejected": msgs(("assistant", "B"))}
    assert normalize_row(row, "messages", "d")["prompt"] == "Q?"
    assert reason_of({k: v for k, v in row.items() if k != "prompt"}, "messages") == "missing_field"


@pytest.mark.parametrize(
    ("chosen", "rejected", "reason"),
    [
        (msgs(("user", "a"), ("assistant", "x")), msgs(("user", "b"), ("assistant", "y")), "prompt_mismatch"),
        (msgs(("user", "a"), ("assistant", "x")), msgs(("user", "a")), "unrecognised_shape"),
        (
            msgs(("user", "a"), ("assistant", "x")),
            msgs(("tool", "a"), ("assistant", "y")),
            "unrecognised_shape",
        ),
        (
            msgs(("user", "a"), ("assistant", "x")),
            [{"role": "assistant", "content": ["x"]}],
            "unrecognised_shape",
        ),
        (msgs(("user", "a"), ("assistant", "x")), "y", "unrecognised_shape"),
        (msgs(("user", "a"), ("assistant", "x")), [], "empty_field"),
        (msgs(("user", "a"), ("assistant", "x")), msgs(("user", "a"), ("assistant", "  ")), "empty_field"),
        (
            msgs(("user", "a"), ("assistant", "x")),
            msgs(("user", "a"), ("assistant", "x")),
            "chosen_equals_rejected",
        ),
    ],
)
def test_messages_bad_rows_get_their_reason(chosen, rejected, reason):
    assert reason_of({"chosen": chosen, "rejected": rejected}, "messages") == reason


def test_flat_row_with_a_message_list_prompt_keeps_its_turns():
    """Chat files in the RewardBench layout: the prompt a message list, the replies strings."""
    history = msgs(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Capital?"))
    pair = normalize_row({"prompt": history, "chosen": "Paris.", "rejected": "Rome."}, "rewardbench", "d")
    assert pair["messages"] == history
    assert pair["prompt"] == "System: Be brief.\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Capital?"
    one = normalize_row({"prompt": msgs(("user", "Q?")), "chosen": "a", "rejected": "b"}, "rewardbench", "d")
    assert one["prompt"] == "Q?" and "messages" not in one  # one plain user turn reads as a prompt string
    ends_on_reply = {"prompt": msgs(("user", "Q?"), ("assistant", "A")), "chosen": "a", "rejected": "b"}
    assert reason_of(ends_on_reply, "rewardbench") == "unrecognised_shape"
    assert reason_of({"prompt": [], "chosen": "a", "rejected": "b"}, "rewardbench") == "empty_field"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"chosen": "a", "rejected": "b"}, "missing_field"),
        ({"prompt": "p", "chosen": "a", "rejected": None}, "missing_field"),
        ({"prompt": "p", "chosen": ["a"], "rejected": "b"}, "unrecognised_shape"),
        ({"prompt": " \n", "chosen": "a", "rejected": "b"}, "empty_field"),
        ({"prompt": "p", "chosen": "same", "rejected": "same\n"}, "chosen_equals_rejected"),
        (["p", "a", "b"], "unrecognised_shape"),
    ],
)
def test_flat_bad_rows_get_their_reason(row, reason):
    assert reason_of(row, "rewardbench") == reason


def test_ids_kept_when_given_else_a_stable_content_hash():
    row = {"prompt": "p", "chosen": "a", "rejected": "b"}
    pair = normalize_row(row, "rewardbench", "d")
    independent = hashlib.sha1(json.dumps(["p", "a", "b"]).encode()).hexdigest()[:16]
    assert pair["id"] == content_id("p", "a", "b") == f"pair-{independent}"
    assert content_id("p", "b", "a") != pair["id"]  # swapping the preference is a different pair
    assert normalize_row({**row, "id": "given"}, "rewardbench", "d")["id"] == "given"


def test_make_ids_unique_is_deterministic_and_avoids_existing_ids():
    rows = [{"id": i} for i in ["a", "a", "a-dup1", "b", "a"]]
    assert make_ids_unique(rows) == 2
    assert [r["id"] for r in rows] == ["a", "a-dup2", "a-dup1", "b", "a-dup3"]


def test_detect_format_by_majority_and_error_when_nothing_matches():
    flat = {"prompt": "p", "chosen": "a", "rejected": "b"}
    transcript = {"chosen": hh("\n\nHuman: x", "a"), "rejected": hh("\n\nHuman: x", "b")}
    messages = {"chosen": msgs(("user", "q"), ("assistant", "a"))}
    assert detect_format([flat, transcript, transcript, None], "f") == "hh"
    assert detect_format([messages, messages, flat], "f") == "messages"
    assert detect_format([messages, flat], "f") == "rewardbench"  # a tie goes to the first in FORMATS
    with pytest.raises(ValueError, match="f: cannot tell the row format"):
        detect_format([{"a": 1}, 3], "f")


def test_normalize_records_counts_every_reason_and_caps_kept_rows():
    good = [RawRecord(i, {"prompt": f"p{i}", "chosen": "a", "rejected": "b"}) for i in range(1, 6)]
    bad = [RawRecord(6, error="not valid JSON"), RawRecord(7, {"prompt": "p", "chosen": "a"})]
    rows, report = normalize_records(bad + good, "f.jsonl", "rewardbench", "drop", "s")
    assert (report["rows_in"], report["kept"], report["truncated"]) == (7, 5, False)
    assert report["dropped"]["invalid_json"] == 1 and report["dropped"]["missing_field"] == 1
    assert sum(report["dropped"].values()) == 2 and report["subsets"] == {"s": 5}
    rows, report = normalize_records(bad + good, "f.jsonl", "rewardbench", "drop", "s", max_rows=3)
    assert [r["prompt"] for r in rows] == ["p1", "p2", "p3"] and report["truncated"] is True
    with pytest.raises(ValueError, match="data.bad_rows"):
        normalize_records(good, "f", "rewardbench", "skip", "s")
