"""Loading external pairs from files and dataset folders: bad-row counts, error messages, splits, config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.rows import load_pairs

from prefpipe.common.config import ConfigError, DataError
from prefpipe.data.sources import load_benchmark_rows


def hh(prefix: str, reply: str) -> str:
    return f"{prefix}\n\nAssistant: {reply}"


def msgs(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": content} for role, content in turns]


TWO_TURNS = "\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: Tell me a joke."
# One line per case; the comment is the reason the row must be counted under (None = kept).
HH_LINES = [
    json.dumps({"chosen": hh(TWO_TURNS, "Why did the chicken..."), "rejected": hh(TWO_TURNS, "No.")}),  # None
    json.dumps({"prompt": "Human: q", "chosen": "yes", "rejected": "no", "id": "flat-1"}),  # None
    json.dumps({"chosen": hh("\n\nHuman: a", "b"), "rejected": hh("\n\nHuman: a", "c"), "id": "x"}),  # None
    '{"chosen": "unterminated',  # invalid_json
    "",  # blank lines are not rows
    "[1, 2]",  # unrecognised_shape
    json.dumps(
        {"chosen": hh("\n\nHuman: a", "b"), "rejected": "\n\nHuman: a no reply"}
    ),  # unrecognised_shape
    json.dumps({"prompt": "p", "chosen": 3, "rejected": "a"}),  # unrecognised_shape
    json.dumps({"chosen": hh("\n\nHuman: a", "b")}),  # missing_field
    json.dumps({"chosen": hh("\n\nHuman: a", "b"), "rejected": None}),  # missing_field
    json.dumps({"chosen": "   ", "rejected": hh("\n\nHuman: a", "b")}),  # empty_field
    json.dumps({"chosen": "\n\nHuman: a\n\nAssistant: ", "rejected": hh("\n\nHuman: a", "b")}),  # empty_field
    json.dumps({"chosen": hh("\n\nHuman: a", "b"), "rejected": hh("\n\nHuman: z", "c")}),  # prompt_mismatch
    json.dumps({"chosen": hh("\n\nHuman: a", "same"), "rejected": hh("\n\nHuman: a", "same ")}),  # equal
    json.dumps({"prompt": "p", "chosen": "a", "rejected": "a"}),  # chosen_equals_rejected
]
HH_EXPECTED_DROPS = {
    "invalid_json": 1,
    "unrecognised_shape": 3,
    "missing_field": 2,
    "empty_field": 2,
    "prompt_mismatch": 1,
    "chosen_equals_rejected": 2,
}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def flat_rows(n: int, subsets: tuple[str, ...] = ("s1", "s2")) -> list[dict]:
    return [
        {
            "prompt": f"prompt {i // 2}",
            "chosen": f"good {i}",
            "rejected": f"bad {i}",
            "subset": subsets[i % 2],
        }
        for i in range(n)
    ]


def test_every_bad_row_reason_is_counted_exactly(tmp_path):
    path = write_lines(tmp_path / "hh.jsonl", HH_LINES)
    cfg = {"source": "jsonl", "path": str(path), "test_fraction": 0.0, "subset_name": "hh"}
    train, test, report = load_pairs(cfg, "drop", seed=0)
    assert report["format"] == "hh"
    assert {k: v for k, v in report["dropped"].items() if v} == HH_EXPECTED_DROPS
    assert (report["rows_in"], report["kept"], report["train"], report["test"]) == (14, 3, 3, 0)
    assert test == [] and report["subsets"] == {"train": {"hh": 3}, "test": {}}
    first = train[0]
    assert first["prompt"] == "Human: Hi\n\nAssistant: Hello.\n\nHuman: Tell me a joke."
    assert (first["chosen"], first["rejected"]) == ("Why did the chicken...", "No.")
    assert [r["id"] for r in train][1:] == ["flat-1", "x"] and first["id"].startswith("pair-")


def test_error_mode_names_file_row_id_and_reason(tmp_path):
    lines = [json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"})] * 2
    lines.append(json.dumps({"prompt": "p", "chosen": "a", "rejected": "a", "id": "bad-7"}))
    path = write_lines(tmp_path / "rows.jsonl", lines)
    with pytest.raises(ValueError) as info:
        load_pairs({"source": "jsonl", "path": str(path)}, "error", seed=0)
    assert str(info.value).startswith(
        f"data.external.path: {path}: row 3 (id 'bad-7'): chosen_equals_rejected"
    )
    broken = write_lines(tmp_path / "broken.jsonl", [lines[0], "", "{oops"])
    with pytest.raises(ValueError, match=r"broken\.jsonl: row 3: invalid_json: not valid JSON"):
        load_pairs({"source": "jsonl", "path": str(broken), "format": "rewardbench"}, "error", 0)


def test_messages_rows_from_jsonl_and_parquet_agree(tmp_path):
    rows = [
        {
            "chosen": msgs(("user", "q1"), ("assistant", "a")),
            "rejected": msgs(("user", "q1"), ("assistant", "b")),
        },
        {
            "chosen": msgs(("user", "q2"), ("assistant", "x"), ("user", "more"), ("assistant", "c")),
            "rejected": msgs(("user", "q2"), ("assistant", "x"), ("user", "more"), ("assistant", "d")),
        },
        {
            "chosen": msgs(("user", "q3"), ("assistant", "a")),
            "rejected": msgs(("user", "other"), ("assistant", "b")),
        },
    ]
    write_lines(tmp_path / "m.jsonl", [json.dumps(r) for r in rows])
    pd.DataFrame(rows).to_parquet(tmp_path / "m.parquet")
    loaded = {}
    for source in ("jsonl", "parquet"):
        cfg = {"source": source, "path": str(tmp_path / f"m.{source}"), "test_fraction": 0.0}
        train, _, report = load_pairs(cfg, "drop", seed=0)
        assert report["format"] == "messages" and report["dropped"]["prompt_mismatch"] == 1
        loaded[source] = train
    assert loaded["jsonl"] == loaded["parquet"]
    assert [r["prompt"] for r in loaded["jsonl"]] == ["q1", "Human: q2\n\nAssistant: x\n\nHuman: more"]


def test_json_parquet_and_hf_folder_give_the_jsonl_rows(tmp_path):
    rows = flat_rows(40)
    rows[5]["id"] = "kept-id"
    rows[9]["chosen"] = None  # a null cell: missing_field in every format
    write_lines(tmp_path / "p.jsonl", [json.dumps(r) for r in rows])
    (tmp_path / "p.json").write_text(json.dumps(rows), encoding="utf-8")
    pd.DataFrame(rows).to_parquet(tmp_path / "p.parquet")
    folder = tmp_path / "dataset"
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "train.parquet")
    pd.DataFrame(flat_rows(6, ("t1", "t2"))).to_parquet(folder / "test.parquet")
    base = {"test_fraction": 0.25, "cache_dir": str(tmp_path / "hf_cache")}
    results = {
        name: load_pairs({**base, "source": source, "path": str(path)}, "drop", seed=3)
        for name, source, path in [
            ("jsonl", "jsonl", tmp_path / "p.jsonl"),
            ("json", "json", tmp_path / "p.json"),
            ("parquet", "parquet", tmp_path / "p.parquet"),
            ("hf", "hf", folder),
            ("hf_file", "hf", tmp_path / "p.parquet"),
        ]
    }
    for name, (train, test, report) in results.items():
        assert (train, test) == results["jsonl"][:2], name
        assert report["dropped"]["missing_field"] == 1 and report["kept"] == 39, name
    assert "kept-id" in {r["id"] for r in results["jsonl"][0] + results["jsonl"][1]}
    train, test, report = load_pairs(
        {**base, "source": "hf", "path": str(folder), "test_split": "test"}, "drop", 0
    )
    assert (
        len(train) == 39
        and report["subsets"]["test"] == {"t1": 3, "t2": 3}
        and report["test_from"] == "test_split"
    )


def test_held_out_split_is_deterministic_disjoint_and_keeps_prompts_together(tmp_path):
    rows = flat_rows(200)
    path = write_lines(tmp_path / "a.jsonl", [json.dumps(r) for r in rows])
    reversed_path = write_lines(tmp_path / "b.jsonl", [json.dumps(r) for r in reversed(rows)])
    cfg = {"source": "jsonl", "path": str(path), "test_fraction": 0.15}
    train, test, _ = load_pairs(cfg, "drop", seed=11)
    again = load_pairs(cfg, "drop", seed=11)
    assert (train, test) == again[:2]
    train_ids, test_ids = {r["id"] for r in train}, {r["id"] for r in test}
    assert not train_ids & test_ids and len(train_ids | test_ids) == 200
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert 30 <= len(test) <= 31  # round(200 * 0.15) = 30, plus at most one more pair of the last prompt
    other_order = load_pairs({**cfg, "path": str(reversed_path)}, "drop", seed=11)
    assert {r["id"] for r in other_order[1]} == test_ids  # the split does not depend on row order
    other_seed = load_pairs(cfg, "drop", seed=12)
    assert {r["id"] for r in other_seed[1]} != test_ids


def test_test_split_file_max_rows_and_unique_ids_across_parts(tmp_path):
    rows = flat_rows(30)
    path = write_lines(tmp_path / "a.jsonl", [json.dumps(r) for r in rows])
    cfg = {"source": "jsonl", "path": str(path), "test_split": str(path), "max_rows": 10}
    train, test, report = load_pairs(cfg, "drop", seed=0)
    assert len(train) == len(test) == 10 and report["reads"][0]["truncated"] is True
    assert report["duplicate_ids"] == 10  # same file twice: every test id was renamed once
    assert len({r["id"] for r in train + test}) == 20
    assert [r["prompt"] for r in test] == [r["prompt"] for r in train]


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"source": "csv", "path": "x"}, "data.source"),
        ({"source": "jsonl"}, "data.external.path"),
        ({"source": "jsonl", "path": "x", "format": "sharegpt"}, "data.external.format"),
        ({"source": "jsonl", "path": "x", "test_fraction": 1.0}, "data.external.test_fraction"),
        ({"source": "jsonl", "path": "x", "max_rows": 0}, "data.external.max_rows"),
        ({"source": "jsonl", "path": "x", "test_fration": 0.1}, "test_fration"),
    ],
)
def test_bad_config_names_the_key(cfg, key):
    with pytest.raises(ConfigError, match=key):
        load_pairs(cfg, "drop", seed=0)


def test_missing_files_and_empty_sources_fail_clearly(tmp_path):
    with pytest.raises(DataError, match=r"^data\.external\.path: .*nope\.parquet: does not exist"):
        load_pairs({"source": "parquet", "path": str(tmp_path / "nope.parquet")}, "drop", 0)
    path = write_lines(tmp_path / "bad.jsonl", [json.dumps({"prompt": "p", "chosen": "a", "rejected": "a"})])
    with pytest.raises(ValueError, match="no usable preference pairs"):
        load_pairs({"source": "jsonl", "path": str(path)}, "drop", 0)
    with pytest.raises(ValueError, match="expected a JSON list"):
        (tmp_path / "obj.json").write_text("{}", encoding="utf-8")
        load_pairs({"source": "json", "path": str(tmp_path / "obj.json")}, "drop", 0)


def test_hub_id_offline_is_a_clear_error(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"no-such-org/no-such-set \[split filtered\].*HF_HUB_OFFLINE"):
        load_benchmark_rows(
            "no-such-org/no-such-set", "filtered", bad_rows="drop", cache_dir=str(tmp_path / "cache")
        )


def test_small_sources_still_hold_out_one_pair(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [json.dumps(r) for r in flat_rows(6, ("s", "s"))][::2])
    train, test, _ = load_pairs({"source": "jsonl", "path": str(path), "test_fraction": 0.05}, "drop", 0)
    assert (len(train), len(test)) == (2, 1)  # round(3 * 0.05) = 0, but a positive fraction holds out one


def test_an_empty_middle_turn_is_dropped_and_counted_by_reason(tmp_path):
    """Issue 50: an empty `content` in a middle turn used to be kept, reading "Assistant: \\n\\nHuman: more"."""
    good = msgs(("user", "q"), ("assistant", "x"), ("user", "more"))
    hollow = msgs(("user", "q"), ("assistant", ""), ("user", "more"))
    blank_question = msgs(("user", " \n"), ("assistant", "x"), ("user", "more"))
    rows = [
        {
            "chosen": [*prefix, {"role": "assistant", "content": "c"}],
            "rejected": [*prefix, {"role": "assistant", "content": "d"}],
        }
        for prefix in (good, hollow, hollow, blank_question)
    ]
    write_lines(tmp_path / "m.jsonl", [json.dumps(r) for r in rows])
    train, _, report = load_pairs(
        {"source": "jsonl", "path": str(tmp_path / "m.jsonl"), "test_fraction": 0.0}, "drop", 0
    )
    assert {k: v for k, v in report["dropped"].items() if v} == {"empty_message": 3}
    assert [r["prompt"] for r in train] == ["Human: q\n\nAssistant: x\n\nHuman: more"]
    with pytest.raises(
        DataError, match=r"row 2: empty_message: chosen\[1\] \(a assistant turn\) has no text"
    ):
        load_pairs({"source": "jsonl", "path": str(tmp_path / "m.jsonl"), "format": "messages"}, "error", 0)
