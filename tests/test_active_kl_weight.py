"""active_learning.kl_weight (prefpipe.active.kl_weight, prefpipe.active_train, the al_train rule): `labelled`
multiplies the learner's max_kl_weight by (training pairs / labelled pairs) of the round, computed here by hand;
only the learner's al_train job gets --kl-reference, and `fixed` (the default) passes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support.models import save_tiny_base
from support.rows import rps_pairs
from support.settings import pipeline, stage_json, tiny_reward_settings
from support.stages import run_main
from support.workflow import REPO, repo_copy, run_snakemake

from prefpipe.active.kl_weight import scaled_kl_weight
from prefpipe.active_train import main as active_train_main
from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_json, write_jsonl

TINY = str(REPO / ".test" / "config" / "tiny.yaml")
ACTIVE = {
    "reward": {"only": ["gpm", "gpm-s1", "bgpm"], "variants": {"gpm-s1": {"seed": 1}}},
    "eval": {"ensembles": {"ens": ["gpm", "gpm-s1"]}},
    "active_learning": {
        "enabled": True, "strategies": ["random", "ensemble_bald"], "learner": "bgpm", "ensemble": "ens",
        "seeds": [0], "rounds": 2, "initial_labels": 20, "labels_per_round": 10, "kl_weight": "labelled",
    },
}  # fmt: skip


def test_labelled_scales_the_weight_by_training_over_labelled_pairs():
    settings = pipeline({}).reward["bgpm"]
    weight = settings.head.bayes.max_kl_weight
    for full, labelled in ((2400, 200), (2400, 800), (2400, 2400), (7, 3)):
        scaled = scaled_kl_weight(settings, full, labelled)
        assert scaled.head.bayes.max_kl_weight == pytest.approx(weight * full / labelled, rel=1e-12)
        assert scaled.head.bayes.kl_warmup_steps == settings.head.bayes.kl_warmup_steps
    assert settings.head.bayes.max_kl_weight == weight  # a copy: the variant's settings are untouched
    with pytest.raises(ConfigError, match=r"head is gpm, not a Bayesian head \(bgpm\)"):
        scaled_kl_weight(pipeline({}).reward["gpm"], 2400, 200)
    with pytest.raises(ConfigError, match="0 labelled pairs of 2400"):
        scaled_kl_weight(settings, 2400, 0)


def test_the_mode_is_a_config_key_with_a_checked_value():
    assert pipeline({}).active_learning is None
    on = {"enabled": True, "learner": "bgpm", "strategies": ["random"]}
    assert pipeline({"active_learning": on}).active_learning.kl_weight == "fixed"  # config.yaml's default
    with pytest.raises(ConfigError, match="kl_weight"):
        pipeline({"active_learning": {**on, "kl_weight": "dataset"}})


def test_the_stage_trains_with_the_weight_of_its_labelled_set(tmp_path: Path):
    """The real stage on real files: 4 labelled pairs of 12 -> 3 x the variant's weight in its config.json."""
    rows = rps_pairs()
    full, labelled = tmp_path / "data", tmp_path / "round1"
    for folder, train in ((full, rows), (labelled, rows[:4])):
        write_jsonl(folder / "pairs_train.jsonl", train)
        write_jsonl(folder / "pairs_test.jsonl", rows[:3])
    settings = tiny_reward_settings("bgpm", train={"steps": 1}, eval={"train_pairs": 0, "test_pairs": False})
    base, weight = save_tiny_base(tmp_path / "base"), settings.head.bayes.max_kl_weight
    for reference, factor in ((full, 3.0), (None, 1.0)):
        out = tmp_path / f"out{factor}"
        code, _ = run_main(
            active_train_main, stage_json(settings), data=labelled, base=base, kl_reference=reference, out=out
        )
        recorded = read_json(out / "config.json")["config"]["head"]["bayes"]["max_kl_weight"]
        assert code == 0 and recorded == pytest.approx(weight * factor, rel=1e-12)


def _train_commands(result) -> dict[str, str]:
    """arm/round/variant -> the al_train shell command of a dry run with --printshellcmds."""
    assert result.returncode == 0, result.output
    commands = re.findall(r"^.*prefpipe\.active_train .*$", result.output, re.MULTILINE)
    out = r"--out '?\S*active_learning/([\w-]+)/seed0/round(\d)/reward/([\w-]+)"
    return {"/".join(re.search(out, c).groups()): c for c in commands}


def test_only_the_learners_training_gets_the_reference_folder(tmp_path: Path):
    wf = repo_copy(tmp_path / "wf", link_src=True)
    (wf / "active.yaml").write_text(yaml.safe_dump(ACTIVE))
    commands = _train_commands(run_snakemake(wf, "-n", "-p", "--configfile", TINY, "active.yaml"))
    assert sorted(commands) == [
        "ensemble_bald/1/bgpm", "initial/0/bgpm", "initial/0/gpm", "initial/0/gpm-s1", "random/1/bgpm"
    ]  # fmt: skip
    for name, command in commands.items():
        has = "--kl-reference results/ci-tiny/data" in command
        assert has == name.endswith("/bgpm"), (name, command)
    (wf / "fixed.yaml").write_text(yaml.safe_dump({"active_learning": {"kl_weight": "fixed"}}))
    fixed = run_snakemake(wf, "-n", "-p", "--configfile", TINY, "active.yaml", "fixed.yaml")
    assert not any("--kl-reference" in c for c in _train_commands(fixed).values())
