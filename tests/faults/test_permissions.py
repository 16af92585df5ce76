"""Fault: results only their owner can read. Under umask 022 every output is 0644 (folders 0755), whatever
wrote it: safetensors' save_file (which creates 0600 files) inside the atomic model folder, the Parquet table
(written through a mkstemp file) and the atomic JSON/text writers. Under umask 077 they stay private."""

from __future__ import annotations

import pandas as pd
import pytest
from support.faults import modes, umask
from support.models import build_reward, save_tiny_base

from prefpipe.common.io import atomic_write_json, write_jsonl
from prefpipe.evaluation.benchmark import write_parquet_atomic
from prefpipe.reward.model import save_reward_model


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_outputs_get_the_umask_mode_not_a_private_one(tmp_path, mask, file_mode, dir_mode):
    base = save_tiny_base(tmp_path / "base")
    model, _ = build_reward(base, "gpm")
    out = tmp_path / "results"
    with umask(mask):
        folder = save_reward_model(model, out / "reward" / "gpm" / "model")
        write_parquet_atomic(
            pd.DataFrame({"id": ["a"], "correct": [True]}), out / "eval" / "per_example.parquet"
        )
        atomic_write_json(out / "eval" / "summary.json", {"n": 1})
        write_jsonl(out / "data" / "pairs_train.jsonl", [{"id": "a"}])
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    assert weights, "the reward model folder holds safetensors files"
    found = modes(out)
    files = {p: m for p, m in found.items() if (out / p).is_file()}
    folders = {p: m for p, m in found.items() if (out / p).is_dir() and p.startswith(("reward/gpm/model",))}
    assert set(files.values()) == {file_mode}, files
    assert set(folders.values()) == {dir_mode}, folders
    assert not [p for p in found if ".tmp" in p]  # no temporary file left behind
