"""The evaluation stage's outputs and config checks, driven by a deterministic test scorer (no reward model)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from support.eval_args import EVAL, SETTINGS
from support.scorers import LengthRuleScorer
from support.settings import eval_settings

from prefpipe.common.config import ConfigError
from prefpipe.common.io import write_jsonl
from prefpipe.evaluation.bench_data import BenchmarkDataError, load_benchmark
from prefpipe.evaluation.evaluate import evaluate_model
from prefpipe.settings.build import to_mapping
from prefpipe.settings.evaluation import EvalSettings
from prefpipe.settings.pipeline import load_stage


def _synthetic_rows():
    rows = []
    for subset in ("chat-arith", "chat-instruct", "safety-refuse", "cyclic-rps"):
        for i in range(6):
            chosen, rejected = ("long answer " * (1 + i % 3), "short") if i % 3 else ("x", "longer one")
            rows.append({"id": f"{subset}-{i}", "prompt": f"q{i}", "chosen": chosen, "rejected": rejected,
                         "subset": subset})  # fmt: skip
    rows.append({"id": "bad-0", "prompt": "q", "chosen": "", "rejected": "r", "subset": "chat-arith"})
    return rows


def _load(name, source, data_dir, bad_rows=SETTINGS.data.bad_rows):
    """load_benchmark as the stage calls it: the configured split and data.bad_rows (or `bad_rows`)."""
    return load_benchmark(name, source, data_dir, EVAL.split, bad_rows)


@pytest.fixture()
def data_dir(tmp_path):
    folder = tmp_path / "data"
    write_jsonl(folder / "pairs_test.jsonl", _synthetic_rows())
    return folder


def test_stage_writes_per_benchmark_and_aggregate_outputs(tmp_path, data_dir, shared_data):
    cfg = eval_settings(
        {
            "benchmarks": {
                "synthetic": "synthetic",
                "real": str(shared_data / "rewardbench_real_subsets.jsonl"),
            },
            "batch_size": 8,
            "mc_samples": 0,
        },
        data={"bad_rows": "drop"},
        seed=0,
    )
    out = tmp_path / "eval"
    top = evaluate_model(LengthRuleScorer(), cfg, data_dir, out, "length-rule", "cpu")

    for name in ("synthetic", "real"):
        assert (out / name / "per_example.parquet").exists() and (out / name / "summary.json").exists()
    for name in ("config.json", "versions.json", "metrics.jsonl", "summary.json", "per_example.parquet"):
        assert (out / name).exists()
    assert not list(out.rglob("*.tmp"))

    summary = json.loads((out / "summary.json").read_text())
    assert summary["primary_benchmark"] == "synthetic" and summary["model"] == "length-rule"
    assert set(summary["benchmarks"]) == {"synthetic", "real"}
    for key in ("subsets", "sections", "overall", "overall_definition", "cyclic", "calibration",
                "n_pairs"):  # fmt: skip
        assert summary[key] == summary["benchmarks"]["synthetic"][key]
    assert top["n_pairs"] == 24
    # Timing lives in timing.json: summary.json holds results only (two runs give the same bytes).
    assert "wall_time_s" not in summary and "pairs_per_second" not in summary["benchmarks"]["real"]
    timing = json.loads((out / "timing.json").read_text())
    assert set(timing["benchmarks"]) == {"synthetic", "real"} and timing["wall_time_s"] > 0
    synth = summary["benchmarks"]["synthetic"]
    assert synth["data"]["rows_in"] == 25 and synth["data"]["rows_kept"] == 24
    assert synth["data"]["dropped"] == {"empty_chosen": 1}
    # Each synthetic subset: rows i % 3 == 0 have the shorter chosen -> 4 of 6 right.
    assert synth["sections"]["chat"]["score"] == pytest.approx(4 / 6)
    assert synth["sections"]["reasoning"]["score"] is None
    assert synth["pooled_accuracy"] == pytest.approx(16 / 24)
    assert synth["cyclic"]["subsets"]["cyclic-rps"]["n"] == 6
    assert {"ece", "brier", "nll", "reliability", "selective"} <= set(synth["calibration"])
    assert summary["benchmarks"]["real"]["n_pairs"] == 663
    real = summary["benchmarks"]["real"]
    # The real file gets RewardBench's official map by default; sections it holds nothing of are not flagged.
    assert real["data"]["sections_map"] == "official" and synth["data"]["sections_map"] == "data"
    assert set(real["sections"]) == {"chat_hard", "safety"} and real["missing_sections"] == []
    assert not any(v["partial"] for v in real["sections"].values())
    assert "chat" in real["sections_not_in_benchmark"]
    for bench in (synth, real):  # the length split and truncation keys are in every benchmark's summary
        assert {"length_split", "longer_pick_rate", "longer_wins_baseline", "truncation"} <= set(bench)
    assert real["truncation"] is None  # the test scorer has no tokenizer

    frame = pd.read_parquet(out / "synthetic" / "per_example.parquet")
    assert list(frame.columns[:8]) == ["id", "subset", "section", "score_chosen_minus_rejected", "variance",
                                       "prob", "correct", "length"]  # fmt: skip
    assert frame.loc[frame["subset"] == "cyclic-rps", "section"].isna().all()
    combined = pd.read_parquet(out / "per_example.parquet")
    assert combined.groupby("benchmark").size().to_dict() == {"synthetic": 24, "real": 663}
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["benchmark"] for m in metrics] == ["synthetic", "real"]


def test_bad_rows_can_be_an_error(data_dir):
    with pytest.raises(BenchmarkDataError, match="row 25: empty chosen"):
        _load("synthetic", "synthetic", data_dir, bad_rows="error")


def test_missing_synthetic_file_is_a_clear_error(tmp_path):
    with pytest.raises(BenchmarkDataError, match="pairs_test.jsonl does not exist"):
        _load("synthetic", "synthetic", tmp_path)


def test_rows_without_subset_or_id_are_filled_and_counted(tmp_path):
    write_jsonl(tmp_path / "pairs_test.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "a"}])
    rows, report = _load("mine", "synthetic", tmp_path)
    assert rows == [{"id": "mine-0", "prompt": "p", "chosen": "a", "rejected": "a", "subset": "mine"}]
    assert report["notes"] == {"id_filled": 1, "subset_filled": 1, "identical_pair_kept": 1}


@pytest.mark.parametrize(
    ("eval_cfg", "key", "message"),
    [
        ({"benchmarks": {"synthetic": None}}, "eval.benchmarks", "every benchmark is null"),
        ({"benchmarks": {"../x": "synthetic"}}, "eval.benchmarks", "'../x' does not match"),
        ({"benchmarks": {"a": 3}}, "eval.benchmarks.a", "3 is not of type"),
        ({"batch_size": 0}, "eval.batch_size", "0 is less than the minimum of 1"),
        ({"selective_coverages": [0.0]}, "eval.selective_coverages.0", "0.0 is less than or equal"),
        ({"xstest_weights": "x"}, "eval.xstest_weights", "'x' is not one of"),
        ({"device": "tpu"}, "eval.device", "'tpu' is not one of"),
        ({"mc_samples": -1}, "eval.mc_samples", "-1 is less than the minimum of 0"),
    ],
)
def test_bad_eval_config_names_the_key(eval_cfg, key, message):
    with pytest.raises(ConfigError, match=re.escape(f"{key}: {message}")):
        eval_settings(eval_cfg)


def _sources(settings):
    return {name: bench.source for name, bench in settings.eval.benchmarks.items()}


def test_given_benchmarks_add_to_the_default_and_null_removes_one():
    assert _sources(eval_settings()) == {"synthetic": "synthetic"}
    added = eval_settings({"benchmarks": {"rb": "allenai/reward-bench"}})
    assert _sources(added) == {"synthetic": "synthetic", "rb": "allenai/reward-bench"}
    assert added.benchmark_order == ["synthetic", "rb"]
    replaced = eval_settings({"benchmarks": {"synthetic": None, "rb": "allenai/reward-bench"}})
    assert _sources(replaced) == {"rb": "allenai/reward-bench"}


# ------------------------------------------------------------------------------ file benchmarks: bad rows
def _write_file_benchmark(path):
    """Six lines: four good pairs, an empty chosen (line 3) and a line that is not JSON (line 5)."""
    good = [{"id": f"g{i}", "prompt": f"q{i}", "chosen": "long answer " * 3, "rejected": "short",
             "subset": "llmbar-natural"} for i in range(4)]  # fmt: skip
    lines = [json.dumps(good[0]), json.dumps(good[1])]
    lines.append(
        json.dumps({"id": "bad-empty", "prompt": "q", "chosen": " ", "rejected": "r", "subset": "x"})
    )
    lines.append(json.dumps(good[2]))
    lines.append('{"id": "bad-json", "prompt": ')
    lines.append(json.dumps(good[3]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _file_cfg(path, bad_rows, synthetic="synthetic"):
    """Eval settings with the file benchmark `mine` beside the synthetic one (synthetic=None: `mine` only)."""
    benchmarks = {"synthetic": synthetic, "mine": str(path)}
    return eval_settings({"benchmarks": benchmarks, "mc_samples": 0}, data={"bad_rows": bad_rows}, seed=0)


def test_file_benchmark_bad_row_is_an_error_naming_file_and_row(tmp_path, data_dir):
    bench = _write_file_benchmark(tmp_path / "bench.jsonl")
    with pytest.raises(BenchmarkDataError) as err:
        _load("mine", str(bench), data_dir, bad_rows="error")
    message = str(err.value)
    assert "eval.benchmarks.mine" in message and str(bench) in message
    assert "row 3 (id 'bad-empty'): empty_field" in message

    # Through the stage: the first bad row stops the run before anything is scored or written.
    cfg = _file_cfg(bench, "error", synthetic=None)  # the synthetic rows have a bad row of their own
    out = tmp_path / "eval"
    with pytest.raises(BenchmarkDataError, match=r"bench\.jsonl: row 3"):
        evaluate_model(LengthRuleScorer(), cfg, data_dir, out, "length-rule", "cpu")
    assert not out.exists()


def test_file_benchmark_bad_rows_dropped_are_counted_in_the_summary(tmp_path, data_dir):
    bench = _write_file_benchmark(tmp_path / "bench.jsonl")
    out = tmp_path / "eval"
    evaluate_model(LengthRuleScorer(), _file_cfg(bench, "drop"), data_dir, out, "length-rule", "cpu")
    summary = json.loads((out / "summary.json").read_text())
    mine = summary["benchmarks"]["mine"]
    assert mine["n_pairs"] == 4
    data = mine["data"]
    assert (data["rows_in"], data["rows_kept"], data["rows_skipped"]) == (6, 4, 2)
    assert data["dropped"] == {"empty_field": 1, "invalid_json": 1}
    assert json.loads((out / "mine" / "summary.json").read_text())["data"] == data
    # The synthetic benchmark's own skip (one empty chosen) is counted the same way.
    assert summary["benchmarks"]["synthetic"]["data"]["rows_skipped"] == 1


def test_missing_benchmark_file_names_the_config_key_and_path(tmp_path):
    source = "../no-such-dir/rewardbench_real_subsets.jsonl"
    with pytest.raises(BenchmarkDataError) as err:
        _load("rewardbench_real", source, tmp_path)
    message = str(err.value)
    assert message.startswith("eval.benchmarks.rewardbench_real: benchmark file")
    assert source in message and "does not exist" in message


def test_flat_or_unknown_eval_settings_are_rejected():
    """The stage reads its settings' `eval`; settings passed flat used to be ignored silently (defaults used)."""
    stage = to_mapping(eval_settings())
    flat = {**{k: v for k, v in stage.items() if k != "eval"}, **stage["eval"]}
    with pytest.raises(ConfigError, match=r"^config\.eval\b"):  # the section the settings belong under
        load_stage(EvalSettings, flat, "config")
    with pytest.raises(ConfigError, match=r"config: unknown key\(s\) batch_size, benchmarks"):
        load_stage(EvalSettings, {**flat, "eval": stage["eval"]}, "config")
    with pytest.raises(ConfigError, match=r"^config\.eval\b.*'batchsize' was unexpected"):
        load_stage(EvalSettings, {**stage, "eval": {**stage["eval"], "batchsize": 4}}, "config")
    with pytest.raises(ConfigError, match=r"config\.eval: .*'batchsize' was unexpected"):
        eval_settings({"batchsize": 4})


def test_primary_is_the_first_configured_benchmark_whatever_its_name(tmp_path, data_dir):
    bench = _write_file_benchmark(tmp_path / "bench.jsonl")
    cfg = eval_settings({"benchmarks": {"synthetic": None, "mine": str(bench), "toy": "synthetic"},
                         "mc_samples": 0}, seed=0)  # fmt: skip
    assert cfg.benchmark_order == ["mine", "toy"]
    top = evaluate_model(LengthRuleScorer(), cfg, data_dir, tmp_path / "eval", "length-rule", "cpu")
    assert top["primary_benchmark"] == "mine" and top["n_pairs"] == 4
    # A synthetic source under any name uses data.sections; the order survives the stage's sorted JSON.
    assert top["benchmarks"]["toy"]["sections"]["chat"]["score"] == pytest.approx(4 / 6)
    rebuilt = load_stage(EvalSettings, json.loads(json.dumps(to_mapping(cfg), sort_keys=True)), "config")
    assert rebuilt.benchmark_order == ["mine", "toy"]
