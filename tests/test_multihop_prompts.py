"""Real multi-hop question files as RL prompts (data.prompts.paragraphs_field): each row keeps its candidate
paragraphs and hops, through prep_data's rows and the file GRPO reads, so `search` with `corpus: row` and
support recall work on MuSiQue and 2Wiki; bad paragraph lists are bad rows (counted, or an error naming the row)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.settings import data_settings

from prefpipe.common.config import DataError
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.data.rl_prompts import load_rl_prompt_rows
from prefpipe.generation.rl_prompts import load_rl_prompts
from prefpipe.grpo.environments.base import ToolCall
from prefpipe.grpo.environments.search import Search
from prefpipe.grpo.rollout.episodes.measures import support_recall, supporting_titles

KEYS = {
    "prompt_field": "question",
    "answer_field": "answer",
    "aliases_field": "answer_aliases",
    "id_field": "id",
    "verifier": "exact_match",
    "paragraphs_field": "paragraphs",
}


def _settings(train: Path, test: Path, **keys):
    overlay = {"prompts": {"source": "jsonl", "path": str(train), "test_path": str(test), **KEYS, **keys}}
    return data_settings(overlay, grpo={"enabled": False})


@pytest.mark.parametrize("name", ["musique", "2wiki"])
def test_real_multihop_rows_keep_paragraphs_hops_and_supporting_titles(shared_data, tmp_path, name):
    train, test = (shared_data / f"multihop_{name}_{part}.jsonl" for part in ("train", "test"))
    cfg = _settings(train, test)
    rows_train, rows_heldout, report = load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
    raw = {r["id"]: r for r in read_jsonl(train)} | {r["id"]: r for r in read_jsonl(test)}
    assert len(rows_train) + len(rows_heldout) + report["heldout"]["overlap_dropped"] == len(raw) - sum(
        report[p]["duplicate_prompts_dropped"] for p in ("train", "heldout")
    )
    for row in rows_train + rows_heldout:
        source = raw[row["id"]]
        assert [(p["title"], p["text"], p["is_supporting"]) for p in row["paragraphs"]] == [
            (p["title"], p["text"], p["is_supporting"]) for p in source["paragraphs"]
        ]
        assert row["hops"] == source["hops"] and row["aliases"] == source["answer_aliases"]
        assert row["prompt"] == source["question"]
    # prep_data writes the rows; GRPO and eval_policy read them back with paragraphs and hops
    write_jsonl(tmp_path / "rl_prompts_heldout.jsonl", rows_heldout)
    loaded, skipped = load_rl_prompts(tmp_path / "rl_prompts_heldout.jsonl")
    assert skipped == {} and [r["paragraphs"] for r in loaded] == [r["paragraphs"] for r in rows_heldout]
    assert [r["hops"] for r in loaded] == [r["hops"] for r in rows_heldout]
    # the row is a search corpus: the first supporting paragraph's own title finds it, and recall counts it
    row = loaded[0]
    titles = supporting_titles(row)
    assert titles == {p["title"] for p in raw[row["id"]]["paragraphs"] if p["is_supporting"]}
    search = Search("row", top_k=1, k1=1.5, b=0.75)
    search.reset(row)
    first = sorted(titles)[0]
    result = search.step(ToolCall("search", first))
    assert result.startswith(f"[1] {first}: ") and support_recall(titles, search.retrieved) == 1 / len(titles)


def test_without_paragraphs_field_rows_have_no_paragraphs(shared_data):
    train, test = (shared_data / f"multihop_musique_{part}.jsonl" for part in ("train", "test"))
    cfg = _settings(train, test, paragraphs_field=None)
    rows_train, _, _ = load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
    assert all("paragraphs" not in r and "hops" not in r for r in rows_train)


@pytest.mark.parametrize(
    ("broken", "reason", "message"),
    [
        ({"paragraphs": []}, "bad_paragraphs", "'paragraphs' is not a non-empty list"),
        ({"paragraphs": "a text"}, "bad_paragraphs", "'paragraphs' is not a non-empty list"),
        (
            {"paragraphs": [{"title": "T"}]},
            "bad_paragraphs",
            r"paragraphs\[0\] has no non-empty string 'text'",
        ),
        (
            {"paragraphs": [{"title": "T", "text": "x", "is_supporting": "yes"}]},
            "bad_paragraphs",
            r"paragraphs\[0\]: 'title' must be a string, 'is_supporting' a bool",
        ),
        ({"paragraphs": None}, "missing_paragraphs", "no 'paragraphs' field"),
    ],
)
def test_bad_paragraphs_are_bad_rows(shared_data, tmp_path, broken, reason, message):
    lines = (shared_data / "multihop_musique_train.jsonl").read_text().splitlines()[:3]
    rows = [json.loads(line) for line in lines]
    rows[1] = rows[1] | broken
    train, test = tmp_path / "train.jsonl", shared_data / "multihop_musique_test.jsonl"
    write_jsonl(train, rows)
    cfg = _settings(train, test)
    kept, _, report = load_rl_prompt_rows(cfg.prompts, "drop", cfg.seed)
    assert [r["id"] for r in kept] == [rows[0]["id"], rows[2]["id"]]
    assert report["train"]["dropped"] == {reason: 1}
    with pytest.raises(DataError, match=rf"train\.jsonl: row 2: {message}"):
        load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)


def test_paragraphs_without_title_or_flag_read_as_empty_title_and_not_supporting(tmp_path, shared_data):
    train = tmp_path / "train.jsonl"
    write_jsonl(train, [{"id": "a", "question": "Q?", "answer": "x", "paragraphs": [{"text": "x is here."}]}])
    cfg = _settings(train, shared_data / "multihop_musique_test.jsonl")
    (row,), _, _ = load_rl_prompt_rows(cfg.prompts, "error", cfg.seed)
    assert row["paragraphs"] == [{"title": "", "text": "x is here.", "is_supporting": False}]
    assert "hops" not in row


# ----------------------------------------------------------------------------------------- demonstrations
def _demo_settings(shared_data: Path, max_chars: int = 400, **demos):
    train, test = (shared_data / f"multihop_musique_{part}.jsonl" for part in ("train", "test"))
    spec = {
        "path": str(shared_data / "multihop_hotpotqa_train.jsonl"),
        "max_result_chars": max_chars,
        **demos,
    }
    overlay = {
        "prompts": {"source": "jsonl", "path": str(train), "test_path": str(test), **KEYS},
        "synthetic": {"pairs_per_subset_train": 2, "pairs_per_subset_test": 1},
    }
    overlay["prompts"] |= {"instruction": "Search, then answer.", "demonstrations": spec}
    return data_settings(overlay, base={"sft": {"enabled": True, "chosen_from_pairs": False}})


def test_demonstrations_from_real_hotpotqa_rows_match_the_real_search_environment(shared_data, tmp_path):
    """prep_data writes only the file's demonstrations; each search names a supporting title, each result is
    what the real search environment (top 1) and its runner's cut return for that title, rendered by the tag
    format, and every kept demonstration's results show its answer (checked by the episode measure)."""
    from prefpipe.data.prepare import prepare
    from prefpipe.grpo.environments.base import EnvironmentRunner, Observation
    from prefpipe.grpo.rollout.episodes.episode import Episode
    from prefpipe.grpo.rollout.episodes.format import TagFormat
    from prefpipe.grpo.rollout.episodes.measures import answer_found

    cfg = _demo_settings(shared_data)
    summary = prepare(cfg, tmp_path)
    demos = read_jsonl(tmp_path / "demonstrations.jsonl")
    report = summary["rl_prompts"]["demonstrations"]
    assert summary["built"]["synthetic_world"] == ["pairs"] and summary["demonstrations"]["n"] == len(demos)
    assert report["rows_read"] == 100 == len(demos) + sum(report["dropped"].values())
    assert len(demos) >= 80  # most HotpotQA rows show their answer within 400 characters
    source = {f"demo-{r['id']}": r for r in read_jsonl(shared_data / "multihop_hotpotqa_train.jsonl")}
    same_as_environment = 0
    for demo in demos:
        row = source[demo["id"]]
        assert demo["prompt"] == row["question"] + "\n\nSearch, then answer."
        turns = demo["turns"]
        assert [t["owner"] for t in turns] == ["policy", "environment"] * 2 + ["policy"]
        searches = [t["text"].removeprefix("<search>").removesuffix("</search>") for t in turns[0:4:2]]
        assert sorted(searches) == sorted(p["title"] for p in row["paragraphs"] if p["is_supporting"])
        assert turns[-1]["text"] == f"<answer>{row['answer']}</answer>"
        assert demo["response"] == "".join(t["text"] for t in turns)
        search = Search("row", top_k=1, k1=1.5, b=0.75)
        runner = EnvironmentRunner(search, 400)
        runner.reset(row)
        for query, result in zip(searches, turns[1:4:2], strict=True):
            observation = runner.run(ToolCall("search", query))
            same_as_environment += TagFormat().render(observation) == result["text"]
        shown = Episode(observations=[Observation(t["text"]) for t in turns[1:4:2]])
        assert answer_found(shown, [row["answer"], *row["answer_aliases"]])
    # a title query's top hit is its own paragraph in 144 of the 162 searches (another paragraph outranks it
    # in the rest): the demonstrations show the supporting paragraph, what the searcher meant to read
    assert same_as_environment >= 0.85 * 2 * len(demos)


def test_demonstrations_keys_are_checked(shared_data):
    from prefpipe.common.config import ConfigError

    with pytest.raises(ConfigError, match="prompts.demonstrations.path .* is prompts.test_path"):
        _demo_settings(shared_data, path=str(shared_data / "multihop_musique_test.jsonl"))
    with pytest.raises(ConfigError, match=r"need a file prompt source .* prompts\.paragraphs_field"):
        data_settings({"prompts": {"demonstrations": {"path": "x.jsonl"}}}, grpo={"enabled": False})


def test_a_demonstration_whose_results_never_show_the_answer_is_dropped(shared_data):
    from prefpipe.data.multihop_demos import demonstration, hop_order, result_text

    paragraphs = [
        {"title": "Mountrail County", "text": "Its seat is Stanley, North Dakota.", "is_supporting": True},
        {"title": "Van Hook Township", "text": "Van Hook is in Mountrail County.", "is_supporting": True},
        {"title": "Port Blair", "text": "A capital.", "is_supporting": False},
    ]
    question = "What is the seat of the county where Van Hook Township is located?"
    assert [p["title"] for p in hop_order(question, paragraphs[:2])] == [
        "Van Hook Township",
        "Mountrail County",
    ]
    turns = demonstration(question, "Stanley", [], paragraphs, 400)
    assert [t["text"] for t in turns] == [
        "<search>Van Hook Township</search>",
        "\n<result>[1] Van Hook Township: Van Hook is in Mountrail County.</result>\n",
        "<search>Mountrail County</search>",
        "\n<result>[1] Mountrail County: Its seat is Stanley, North Dakota.</result>\n",
        "<answer>Stanley</answer>",
    ]
    # cut at 30 characters, "[1] Mountrail County: Its seat" loses Stanley: no demonstration
    assert result_text(paragraphs[0], 30) == "\n<result>[1] Mountrail County: Its seat [cut]</result>\n"
    assert demonstration(question, "Stanley", [], paragraphs, 30) is None
    assert (
        demonstration(question, "Stanley", [], [p | {"is_supporting": False} for p in paragraphs], 400)
        is None
    )
