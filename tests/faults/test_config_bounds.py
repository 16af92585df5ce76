"""Faults, second round, in the configuration (issue 35): every value the schema accepts can run. Integers are
written as integers, the ranges the code needs are checked before anything runs (each refused in one line naming
the key), a YAML alias is refused before anything copies or walks the config (a "billion laughs" file costs
neither time nor memory), and the messages for an empty `reward.variants`, a switched-off GRPO with `grpo.only`
and an unknown reward model name the real cause."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.settings import pipeline
from support.stages import SRC
from support.workflow import repo_copy

from prefpipe.common.config import ConfigError, read_config_file
from prefpipe.settings.pipeline import PipelineSettings, load_config


def _refused(overlay, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        pipeline(overlay)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("overlay", "match"),
    [
        ({"base": {"sft": {"steps": 4.0}}}, r"^config\.base\.sft\.steps: 4\.0 is not of type 'integer'"),
        ({"grpo": {"defaults": {"steps": 2.0}}}, r"^config\.grpo\.defaults\.steps: 2\.0 is not of type"),
        ({"seed": 2**32}, r"^config\.seed: 4294967296 is greater than the maximum of 4294967295"),
        (
            {"grpo": {"defaults": {"adam_betas": [0.9, 1.0]}}},
            r"^config\.grpo\.defaults\.adam_betas\.1: 1\.0 is greater than or equal to the maximum of 1",
        ),
        (
            {"grpo": {"runs": {"verifier": {"adam_betas": [-0.1, 0.99]}}}},
            r"^config\.grpo\.runs\.verifier\.adam_betas\.0: -0\.1 is less than the minimum of 0",
        ),
        (
            {"base": {"model": {"num_key_value_heads": 3}}},
            r"^base\.model\.num_key_value_heads: 3 does not divide model\.num_attention_heads \(4\)",
        ),
        (
            {"base": {"model": {"hidden_size": 66}}},
            r"^base\.model\.hidden_size: 66 is not divisible by model\.num_attention_heads \(4\)",
        ),
        (
            {"data": {"source": "jsonl", "external": {"path": "x.jsonl", "test_fraction": 0}}},
            r"^data\.external\.test_fraction: 0 with no test_split leaves no test pairs",
        ),
        (
            {"ablation": {"bootstrap_resamples": 1}},
            r"^config\.ablation\.bootstrap_resamples: 1 is less than the minimum of 100",
        ),
        (
            {"report": {"figure_dpi": 100000}},
            r"^config\.report\.figure_dpi: 100000 is greater than the maximum",
        ),
        (
            {"eval": {"calibration_bins": 10**8}},
            r"^config\.eval\.calibration_bins: 100000000 is greater than the maximum of 1000",
        ),
    ],
)
def test_a_value_the_code_cannot_run_is_refused_naming_the_key(overlay, match):
    _refused(overlay, match)


def test_the_bounds_keep_the_values_the_code_needs():
    """The edges that must still pass: a seed of 2^32 - 1, betas of 0, kv heads that divide the heads, 100
    resamples, a positive test_fraction, a test_fraction of 0 beside a test_split."""
    settings = pipeline(
        {
            "seed": 2**32 - 1,
            "grpo": {"defaults": {"adam_betas": [0.0, 0.999]}},
            "base": {"model": {"num_key_value_heads": 2}},
            "ablation": {"bootstrap_resamples": 100},
        }
    )
    assert settings.base.model.num_key_value_heads == 2 and settings.base.seed == 2**32 - 1
    external = {"path": "a.jsonl", "test_split": "b.jsonl", "test_fraction": 0}
    overlay = {"data": {"source": "jsonl", "external": external}, "eval": {"benchmarks": {"held": "heldout"}}}
    assert pipeline(overlay).data.external.test_fraction == 0


def test_sft_max_length_below_every_demonstration_names_the_key(tmp_path):
    from prefpipe.base.sft import encode_demonstrations
    from prefpipe.base.tokenizer import train_tokenizer

    rows = [{"id": f"d{i}", "prompt": f"Repeat: word{i}", "response": f"word{i} word{i}"} for i in range(4)]
    tokenizer = train_tokenizer([r["prompt"] + r["response"] for r in rows], 300, 64)
    shortest = min(len(ids) for ids, _ in encode_demonstrations(tokenizer, rows, 64).examples)
    with pytest.raises(ConfigError, match=rf"^base\.sft\.max_length: 8 tokens is below every demonstration "
                       rf"\(the shortest has {shortest}; 4 too long"):  # fmt: skip
        encode_demonstrations(tokenizer, rows, 8)


def test_empty_reward_variants_and_grpo_only_name_the_real_cause(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("reward:\n  variants: {}\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=rf"^{empty}: reward\.variants: {{}} removes nothing .*reward\.only"
    ):
        load_config(empty)
    with pytest.raises(ConfigError, match=r"^overlay: eval\.benchmarks: {} removes nothing .*: null"):
        load_config({"eval": {"benchmarks": {}}})
    # grpo.only is checked against the declared runs, also when GRPO is off (then no run is trained)
    assert pipeline({"grpo": {"enabled": False, "only": ["verifier"]}}).grpo == {}
    message = _refused({"grpo": {"enabled": False, "only": ["verifer"]}}, r"^grpo\.only names \['verifer'\]")
    assert "'verifier'" in message and "([])" not in message
    # a reward model no variant declares: the fix is to name or define one, not reward.only
    message = _refused(
        {"grpo": {"runs": {"rm_bt": {"reward_model": "bt2"}}}},
        r"^grpo\.runs\.rm_bt\.reward_model = 'bt2' is not in reward\.variants \(\[",
    )
    assert "reward.only" not in message and "define reward.variants.bt2" in message


BOMB = "\n".join(
    ["report:", "  ablation:", '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"    {b}: &{b} [{','.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
)


def test_alias_bomb_is_refused_before_any_copy_in_little_time_and_memory(tmp_path):
    """A "billion laughs" file (9^9 strings through nested aliases) is refused while it is parsed, naming the
    file, line and alias; the check command's whole process stays far below 200 MB and a second."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{bomb}:4:12: not valid YAML: alias \*a refused"):
        read_config_file(bomb)
    # the check command as scripts/run.sh runs it, measured from a parent that starts nothing else
    probe = (
        "import resource, subprocess, sys, time; start = time.perf_counter(); "
        f"run = subprocess.run([sys.executable, '-m', 'prefpipe.common.config', {str(bomb)!r}], "
        "capture_output=True, text=True); "
        "print(run.returncode, time.perf_counter() - start, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, repr(run.stderr))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
    ).stdout.split(" ", 3)
    code, elapsed, peak_mb, stderr = int(out[0]), float(out[1]), float(out[2]), out[3]
    assert code == 2 and stderr.count("\\n") == 1 and "alias *a refused" in stderr
    assert peak_mb < 200 and elapsed < 5  # /usr/bin/time -v: 0.16 s, 13 MB (an idle core; 5 s for a busy one)
    # a config that shares objects (what aliases load as, e.g. in Snakemake's own merge of a --configfile) is
    # refused before the settings layer copies it
    config, shared = load_config(), ["x"] * 3
    config["report"]["ablation"]["baselines"] = config["report"]["ablation"]["variants"] = shared
    with pytest.raises(ConfigError, match=r"^config: report\.ablation\.\w+ is the same object as report\."):
        PipelineSettings.from_config(config)


def test_python_tag_is_refused_naming_the_file(tmp_path):
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text('seed: !!python/object/apply:os.system ["echo pwned"]\n', encoding="utf-8")
    with pytest.raises(
        ConfigError, match=rf"^{tagged}:1:7: not valid YAML: .*python/object/apply:os\.system"
    ):
        read_config_file(tagged)


def test_plain_snakemake_refuses_the_alias_bomb_and_an_empty_variants_overlay(tmp_path):
    """The SLURM profile path (`snakemake --configfile X`, no run.sh pre-check): the Snakefile's own check names
    the file. (Snakemake's CLI parses --configfile files first; a list alias loads as shared objects, cheaply.)"""
    work = repo_copy(tmp_path / "wf", link_src=True)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB + "\n", encoding="utf-8")
    empty = tmp_path / "empty.yaml"
    empty.write_text("reward:\n  variants: {}\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1"]
    for path, message in (
        (bomb, f"{bomb}:4:12: not valid YAML: alias *a refused"),
        (empty, "removes nothing"),
    ):
        run = subprocess.run(
            [*cmd, "--configfile", str(path)], cwd=work, capture_output=True, text=True, timeout=120
        )
        assert run.returncode != 0 and message in run.stdout + run.stderr
    assert not (work / "results").exists()


def test_demonstrations_cut_results_where_the_episodes_cut_them():
    """A file's tool-use demonstrations teach the base the `[cut]` mark at data.prompts.demonstrations'
    length; a multi-turn run cutting elsewhere is refused naming both keys (multihop_real.yaml as written runs)."""
    real = "config/experiments/multihop_real.yaml"
    PipelineSettings.from_config(load_config(real))
    longer = {"grpo": {"runs": {"search": {"episodes": {"max_result_chars": 301}}}}}
    with pytest.raises(ConfigError) as info:
        PipelineSettings.from_config(load_config(real, longer))
    assert str(info.value).startswith(
        "grpo.runs.search.episodes.max_result_chars = 301 differs from "
        "data.prompts.demonstrations.max_result_chars = 300"
    )


def test_the_real_multihop_run_reads_the_real_questions():
    """multihop_real.yaml's run is named like the default's `search`, which trains on the synthetic world
    (prompts: multihop): the overlay's run must say `prompts: main`, or it inherits the world and prep_data builds
    it beside the 2Wiki questions."""
    settings = PipelineSettings.from_config(load_config("config/experiments/multihop_real.yaml"))
    assert settings.grpo["search"].prompts == "main"
    assert not settings.data.multihop_alongside
