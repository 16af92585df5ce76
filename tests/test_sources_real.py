"""Real preference data (../shared/data): RewardBench-format subsets and HH-RLHF harmless pairs."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
from support.rows import load_pairs

from prefpipe.data.sources import load_benchmark_rows

LLMBAR = {
    "llmbar-natural": 100,
    "llmbar-adver-neighbor": 134,
    "llmbar-adver-GPTInst": 92,
    "llmbar-adver-GPTOut": 47,
    "llmbar-adver-manual": 46,
}


def raw_rows(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_rewardbench_subsets_counted_on_the_real_file(shared_data):
    rows, report = load_benchmark_rows(
        str(shared_data / "rewardbench_real_subsets.jsonl"), "filtered", bad_rows="drop"
    )
    counts = Counter(row["subset"] for row in rows)
    assert {name: counts[name] for name in LLMBAR} == LLMBAR and sum(LLMBAR.values()) == 419
    assert counts["xstest-should-respond"] == 113 and counts["xstest-should-refuse"] == 131
    assert len(rows) == 663 and report["subsets"] == dict(sorted(counts.items()))
    assert sum(report["dropped"].values()) == 0 and report["duplicate_ids"] == 0
    raw = raw_rows(shared_data / "rewardbench_real_subsets.jsonl")
    assert rows == [{k: r[k] for k in ("id", "prompt", "chosen", "rejected", "subset")} for r in raw]


def test_real_rewardbench_rows_survive_parquet_and_a_dataset_folder(shared_data, tmp_path):
    raw = raw_rows(shared_data / "rewardbench_real_subsets.jsonl")
    pd.DataFrame(raw).to_parquet(tmp_path / "rb.parquet")
    folder = tmp_path / "reward-bench"
    (folder / "data").mkdir(parents=True)  # the hub's own layout, where a file name names its split
    pd.DataFrame(raw).to_parquet(folder / "data" / "filtered-00000-of-00001.parquet")
    expected, _ = load_benchmark_rows(
        str(shared_data / "rewardbench_real_subsets.jsonl"), "filtered", bad_rows="drop"
    )
    from_parquet, _ = load_benchmark_rows(str(tmp_path / "rb.parquet"), "filtered", bad_rows="drop")
    from_folder, report = load_benchmark_rows(
        str(folder), "filtered", bad_rows="drop", cache_dir=str(tmp_path / "cache")
    )
    assert from_parquet == expected and from_folder == expected and report["source"] == "hf"


def test_real_hh_pairs_drop_exactly_the_empty_responses(shared_data):
    path = shared_data / "hh_rlhf_harmless_test.jsonl"
    raw = raw_rows(path)
    empty = sum(1 for r in raw if not all(r[k].strip() for k in ("prompt", "chosen", "rejected")))
    cfg = {"source": "jsonl", "path": str(path), "test_fraction": 0.1, "subset_name": "hh-harmless"}
    train, test, report = load_pairs(cfg, "drop", seed=0)
    assert empty == 4 and report["dropped"]["empty_field"] == empty
    assert sum(report["dropped"].values()) == empty and report["kept"] == len(raw) - empty
    assert len(train) + len(test) == len(raw) - empty and abs(len(test) - 0.1 * (len(raw) - empty)) <= 2
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert report["subsets"]["test"] == {"hh-harmless": len(test)}


def test_real_hh_rows_rebuilt_as_transcripts_split_back_exactly(shared_data, tmp_path):
    """The shared file was split at the last Assistant turn; rebuilding the transcripts must round-trip."""
    raw = [r for r in raw_rows(shared_data / "hh_rlhf_harmless_test.jsonl") if r["chosen"].strip()]
    transcripts = [
        {
            "chosen": f"\n\n{r['prompt']}\n\nAssistant: {r['chosen']}",
            "rejected": f"\n\n{r['prompt']}\n\nAssistant: {r['rejected']}",
        }
        for r in raw
    ]
    path = tmp_path / "transcripts.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in transcripts), encoding="utf-8")
    cfg = {"source": "jsonl", "path": str(path), "test_fraction": 0.0}
    train, _, report = load_pairs(cfg, "error", seed=0)
    assert report["format"] == "hh" and len(train) == len(raw)
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in train] == [
        (r["prompt"], r["chosen"], r["rejected"]) for r in raw
    ]
