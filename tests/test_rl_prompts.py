"""RL prompts from files (data.prompts): answer extraction and the chat-answer verifiers on real GSM8K / QA
strings, GSM8K calculator steps checked by hand, held-out disjointness, and prep_data building only what a
config uses; chat prompt files keep their turns up to the rows GRPO reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.settings import data_settings

from prefpipe.common.chat import conversation, plain_history
from prefpipe.common.config import ConfigError, DataError
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.data.answers import extract_answer, final_number, normalize_number
from prefpipe.data.calculator_steps import calculator_steps, derive_calculator_steps
from prefpipe.data.hh_transcript import parse_transcript
from prefpipe.data.prepare import prepare
from prefpipe.data.rl_prompts import load_rl_prompt_rows, parse_answer
from prefpipe.data.verifier import score, verify
from prefpipe.generation.rl_prompts import load_rl_prompts
from prefpipe.grpo.rewards import token_f1


@pytest.fixture
def gsm8k(shared_data: Path) -> tuple[Path, Path]:
    """The shared GSM8K train and test files (../shared/data)."""
    return shared_data / "gsm8k_train.jsonl", shared_data / "gsm8k_test.jsonl"


# ----------------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    ("completion", "number"),
    [
        ("48 / 2 = 24. The answer is 24.", "24"),
        ("\\boxed{1,200}", "1200"),
        ("So she has $18 left.", "18"),
        ("First 3 + 4 = 7, then 7 * 2 = 14.\n#### 14", "14"),
        ("The answer is $1,250.00", "1250"),
        ("I think 5... no wait. The final answer is: **-3**", "-3"),
        ("It is 12.0 meters.", "12"),
        ("The answer is 24.<|im_end|>\n99", "24"),  # cut at the chat end marker
        ("He needs \\boxed{\\frac{1}{2}} cup", "1"),  # first number of the boxed text: not a fraction parser
        ("no digits here", None),
    ],
)
def test_final_number_from_chat_answers(completion, number):
    assert final_number(completion) == number


def test_final_number_of_every_real_gsm8k_solution_is_its_answer(gsm8k):
    """The `#### N` line of each real solution (2,500 rows, commas and all) gives the file's answer field."""
    rows = read_jsonl(gsm8k[0]) + read_jsonl(gsm8k[1])
    wrong = [r["id"] for r in rows if final_number(r["solution"]) != r["answer"]]
    assert len(rows) == 2500 and wrong == []
    assert parse_answer("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 1,024") == "1024"


def test_extract_answer_spans():
    assert extract_answer("The answer is Paris.") == "Paris"
    assert extract_answer('Answer: "the Eiffel Tower"') == "the Eiffel Tower"
    assert extract_answer("It was built in \\boxed{1889}. The answer is 5") == "1889"  # boxed wins
    assert extract_answer("Paris") is None
    assert normalize_number("$0.50") == "0.5" and normalize_number("+007") == "7"


# ----------------------------------------------------------------------------------------- verifiers
@pytest.mark.parametrize(
    ("kind", "answer", "aliases", "completion", "expected"),
    [
        ("math", "24", [], "48 / 2 = 24. The answer is 24.", 1.0),
        ("math", "24", [], "48 / 2 = 24. The answer is 25.", 0.0),  # the marked answer, not the last 24
        ("math", "1200", [], "\\boxed{1,200}", 1.0),
        ("math", "18", [], "So she has $18 left.", 1.0),
        ("exact_match", "Paris", [], "The capital of France is Paris. The answer is Paris.", 1.0),
        ("exact_match", "United States", ["USA", "U.S."], "The answer is the U.S.", 1.0),  # alias
        ("exact_match", "United States", [], "The answer is the U.S.", 0.0),
        ("token_f1", "Barack Obama", ["Obama"], "The answer is President Obama.", 2 / 3),
        ("format", "ignored", [], "48 / 2 = 24.\nThe answer is 24.", 1.0),
        ("format", "ignored", [], "The answer is 24. Let me know if you need more.", 0.0),
        ("format", "ignored", [], "24", 0.0),
    ],
)
def test_chat_verifiers_with_aliases(kind, answer, aliases, completion, expected):
    assert score(kind, answer, completion, aliases) == pytest.approx(expected)
    assert verify(kind, answer, completion, aliases) is (expected == 1.0)


def test_token_f1_against_a_hand_computation():
    # "president obama" vs "barack obama": 1 shared token, precision 1/2, recall 1/2 -> F1 1/2;
    # vs alias "obama": precision 1/2, recall 1 -> F1 2/3 (the best counts)
    assert token_f1("President Obama", "Barack Obama") == pytest.approx(0.5)
    assert token_f1("President Obama", "Obama") == pytest.approx(2 / 3)
    assert score("token_f1", "Barack Obama", "The answer is President Obama.") == pytest.approx(0.5)
    # MuSiQue-style: "the" is an article; punctuation dropped; 2 of 3 prediction tokens shared with 2 reference
    assert token_f1("the Tower of London.", "Tower London") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_synthetic_kinds_still_grade_the_first_line():
    assert verify("add", "7", "7") and not verify("add", "7", "The answer is 7.")
    assert score("upper", "CAT", "CAT") == 1.0


# ----------------------------------------------------------------------------------------- calculator steps
def test_calculator_steps_of_a_real_row_by_hand(gsm8k):
    from collections import Counter

    row = next(r for r in read_jsonl(gsm8k[0]) if r["id"] == "gsm8k-train-3155")
    skipped: Counter = Counter()
    steps = calculator_steps(row["solution"], skipped)
    # <<1/4*200=50>> has two operations and is skipped; the other five are single steps
    assert steps == [
        ("What is 200 - 50?", "150", "-"),
        ("What is 50 / 5?", "10", "/"),
        ("What is 150 + 5?", "155", "+"),
        ("What is 50 - 5?", "45", "-"),
        ("What is 155 - 45?", "110", "-"),
    ]
    assert skipped == {"not_one_operation": 1}


def test_calculator_steps_skip_non_integer_and_wrong_annotations():
    from collections import Counter

    skipped: Counter = Counter()
    text = "<<7/2=3.5>> <<3*4=13>> <<2.5*4=10>> <<1,000+1=1001>> <<(2+3)=5>> <<6/0=0>>"
    assert calculator_steps(text, skipped) == [("What is 2.5 * 4?", "10", "*")]
    assert skipped == {"non_integer": 1, "wrong_annotation": 1, "not_one_operation": 2, "unparsable": 1}


def test_derived_steps_are_deduplicated_and_counted_per_op():
    rows = [
        {"id": "a", "solution": "<<2+3=5>> and <<5*2=10>>"},
        {"id": "b", "solution": "<<2+3=5>> then <<9-4=5>>"},
        {"id": "c", "solution": "no annotations"},
    ]
    out, report = derive_calculator_steps(rows, "solution")
    assert [(r["id"], r["prompt"], r["answer"]) for r in out] == [
        ("a-step0", "What is 2 + 3?", "5"),
        ("a-step1", "What is 5 * 2?", "10"),
        ("b-step1", "What is 9 - 4?", "5"),
    ]
    assert report["steps_per_op"] == {"+": 1, "-": 1, "*": 1, "/": 0}
    assert report["duplicates_dropped"] == 1 and report["rows_without_steps"] == 1


# ----------------------------------------------------------------------------------------- file sources
def _prompts(**keys) -> dict:
    return {"prompts": {"source": "jsonl", **keys}}


def test_heldout_overlap_is_counted_and_dropped(tmp_path):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_jsonl(
        train,
        [
            {"q": "Who wrote Hamlet?", "a": "Shakespeare", "al": ["William Shakespeare"], "key": 1},
            {"q": "Capital of France?", "a": "Paris", "al": [], "key": 2},
        ],
    )
    write_jsonl(
        test,
        [
            {"q": "  who wrote   HAMLET? ", "a": "Shakespeare", "al": [], "key": 3},  # same prompt: dropped
            {"q": "Capital of Italy?", "a": "Rome", "al": ["Roma"], "key": 4},
            {"q": "No answer here", "key": 5},  # bad row: dropped and counted
        ],
    )
    cfg = data_settings(
        _prompts(
            path=str(train),
            test_path=str(test),
            prompt_field="q",
            answer_field="a",
            aliases_field="al",
            id_field="key",
            verifier="exact_match",
            instruction="Reply with 'The answer is X.'",
        )
    )
    rows_train, rows_heldout, report = load_rl_prompt_rows(cfg.prompts, "drop", cfg.seed)
    assert rows_train[0] == {
        "id": "1",
        "prompt": "Who wrote Hamlet?\n\nReply with 'The answer is X.'",
        "answer": "Shakespeare",
        "aliases": ["William Shakespeare"],
        "kind": "exact_match",
    }
    assert [r["id"] for r in rows_heldout] == ["4"] and rows_heldout[0]["aliases"] == ["Roma"]
    assert report["heldout"]["overlap_dropped"] == 1
    assert report["heldout"]["dropped"] == {"missing_answer": 1}
    with pytest.raises(DataError, match=r"test\.jsonl: row 3: no 'a' field"):
        load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)


def test_train_file_equal_to_test_file_is_a_config_error(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"prompt": "x", "answer": "1"}])
    with pytest.raises(ConfigError, match="data.prompts.path and prompts.test_path are the same file"):
        data_settings(_prompts(path=str(path), test_path=str(tmp_path / "." / "p.jsonl")))
    with pytest.raises(ConfigError, match="prompts.answer_field is null"):
        data_settings(_prompts(path="a.jsonl", test_path="b.jsonl", answer_field=None))
    with pytest.raises(ConfigError, match="prompts.verifier 'poem' is not a registered verifier"):
        data_settings(_prompts(path="a.jsonl", test_path="b.jsonl", verifier="poem"))


def test_prep_data_with_gsm8k_calculator_steps_writes_rows_and_no_demonstrations(gsm8k, tmp_path):
    overlay = _prompts(
        path=str(gsm8k[0]),
        test_path=str(gsm8k[1]),
        derive="calculator_steps",
        instruction="End your reply with 'The answer is N.'",
        max_train=300,
        max_heldout=200,
    )
    overlay["synthetic"] = {"pairs_per_subset_train": 2, "pairs_per_subset_test": 1}
    cfg = data_settings(overlay, base={"sft": {"enabled": False}})
    assert cfg.demonstrations_needed is False
    summary = prepare(cfg, tmp_path)
    assert not (tmp_path / "demonstrations.jsonl").exists()
    assert summary["built"] == {"synthetic_world": ["pairs"], "not_built": ["demonstrations.jsonl"]}
    assert summary["demonstrations"]["built"] is False and summary["demonstrations"]["n"] == 0
    train, heldout = (
        read_jsonl(tmp_path / "rl_prompts_train.jsonl"),
        read_jsonl(tmp_path / "rl_prompts_heldout.jsonl"),
    )
    assert (len(train), len(heldout)) == (300, 200)
    assert summary["files"]["rl_prompts_train.jsonl"] == 300
    rl = summary["rl_prompts"]
    assert rl["train"]["derived"]["steps"] == 2829  # all of gsm8k_train before the cap
    assert rl["train"]["derived"]["steps_per_op"] == {"+": 793, "-": 736, "*": 876, "/": 424}
    assert rl["heldout"]["overlap_dropped"] == 492
    assert rl["train_per_kind"] == {"math": 300}
    keys = {r["prompt"] for r in train}
    assert not keys & {r["prompt"] for r in heldout}
    first = train[0]
    assert first["prompt"].endswith("?\n\nEnd your reply with 'The answer is N.'") and first["kind"] == "math"
    assert verify("math", first["answer"], f"The answer is {first['answer']}.")
    assert json.loads((tmp_path / "rl_prompts_train.jsonl").read_text().splitlines()[0]) == first


def test_synthetic_world_parts_are_the_same_rows_whichever_parts_are_built(tmp_path):
    from support.settings import world_settings

    from prefpipe.data.synthetic_world import build_world

    cfg = world_settings(
        pairs=(3, 2), triples=(2, 1), rl_prompts=(16, 8), demonstrations=20, demo_error_rate=0.3
    )
    full = build_world(cfg, 0)
    pairs_only = build_world(cfg, 0, frozenset({"pairs"}))
    assert pairs_only.pairs_train == full.pairs_train and pairs_only.pairs_test == full.pairs_test
    assert pairs_only.demonstrations == [] and pairs_only.rl_prompts_train == []
    assert build_world(cfg, 0, frozenset({"demonstrations"})).demonstrations == full.demonstrations


def test_prompts_without_answers_from_hh_prompts(tmp_path):
    train, test = tmp_path / "hh_train.jsonl", tmp_path / "hh_test.jsonl"
    write_jsonl(
        train, [{"prompt": "\n\nHuman: Hi!\n\nAssistant:", "chosen": "a", "rejected": "b", "id": "h1"}]
    )
    write_jsonl(test, [{"prompt": "\n\nHuman: How do I bake bread?\n\nAssistant:", "id": "h2"}])
    answerless = _prompts(path=str(train), test_path=str(test), answer_field=None, verifier="none")
    with pytest.raises(
        ConfigError,
        match=r"grpo\.runs\.verifier\.rewards\[0\]\.type \(verifier\) needs prompt answers, but data\.prompts\.verifier is 'none'",
    ):
        data_settings(answerless)  # the default GRPO run grades with the verifier
    cfg = data_settings(answerless, grpo={"enabled": False})
    rows_train, rows_heldout, _ = load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
    assert rows_train == [
        {
            "id": "h1",
            "prompt": "\n\nHuman: Hi!\n\nAssistant:",
            "answer": None,
            "aliases": [],
            "kind": "none",
            "messages": [{"role": "user", "content": "Hi!"}],  # the policy reads the turn, not the transcript
        }
    ]
    assert rows_heldout[0]["answer"] is None
    assert rows_heldout[0]["messages"] == [{"role": "user", "content": "How do I bake bread?"}]


def test_prompts_from_a_chat_file_keep_their_turns_up_to_grpo(tmp_path, shared_data):
    """A prompt file whose `messages` field is a message list (a real HH history, one with a system turn):
    the rows keep the turns, the prompt text is their plain transcript, and the file GRPO reads keeps them.
    A list that ends on the assistant's turn is a bad row named by file and row."""
    lines = list((shared_data / "hh_rlhf_helpful_test.jsonl").open())[:2]
    histories = [parse_transcript(json.loads(line)["prompt"]) for line in lines]
    histories[1] = [{"role": "system", "content": "Be brief."}, *histories[1]]
    train, test = tmp_path / "chat_train.jsonl", tmp_path / "chat_test.jsonl"
    write_jsonl(train, [{"id": "c1", "messages": histories[0]}, {"id": "c2", "messages": histories[1]}])
    write_jsonl(test, [{"id": "c3", "messages": [{"role": "user", "content": "How do I bake bread?"}]}])
    keys = {"prompt_field": "messages", "answer_field": None, "verifier": "none"}
    cfg = data_settings(_prompts(path=str(train), test_path=str(test), **keys), grpo={"enabled": False})
    rows_train, rows_heldout, _ = load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
    assert [r["messages"] for r in rows_train] == histories
    assert [r["prompt"] for r in rows_train] == [plain_history(h) for h in histories]
    assert rows_heldout[0]["prompt"] == "How do I bake bread?" and "messages" not in rows_heldout[0]
    write_jsonl(tmp_path / "rl_prompts_train.jsonl", rows_train)  # what prep_data writes, what GRPO reads
    loaded, _ = load_rl_prompts(tmp_path / "rl_prompts_train.jsonl")
    assert [conversation(r) for r in loaded] == histories
    write_jsonl(train, [{"id": "c1", "messages": [*histories[0], {"role": "assistant", "content": "ok"}]}])
    with pytest.raises(
        DataError, match=rf"^{train}: row 1: the last message of 'messages' is from 'assistant'"
    ):
        load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
