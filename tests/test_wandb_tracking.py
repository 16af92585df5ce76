"""wandb runs (prefpipe.common.tracking via RunRecord): grouped by experiment and seed, a job type per stage,
tags and a deterministic id, so a stage started again (a requeued SLURM job) continues the same run. Checked on
real offline runs: the run record inside the offline run's .wandb file is read back independently."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from prefpipe.common.run_record import RunRecord
from prefpipe.common.tracking import wandb_identity

pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402

BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) records
HEADER = 7  # ":W&B", magic (2 bytes), version (1 byte)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """The payloads of the log file's records (fragments joined)."""
    data, out, pending, pos = path.read_bytes(), [], b"", HEADER
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer too short for a header: skip to the next block
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        pending = payload if kind in (FULL, FIRST) else pending + payload
        if kind in (FULL, LAST):
            out.append(pending)
    return out


def run_record_of(wandb_file: Path, wait_s: float = 10.0):
    """The run record; wandb's core process writes the file, which once (first run on a busy machine) was
    read before that record was there, so the file is read again for up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        kinds = []
        for payload in records(wandb_file):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            kinds.append(record.WhichOneof("record_type"))
            if kinds[-1] == "run":
                return record.run
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise AssertionError(f"{wandb_file} ({wandb_file.stat().st_size} bytes): no run record in {kinds}")


def stage_config(seed: int = 3, variant: str = "gpm") -> dict:
    return {
        "experiment": "tiny",
        "seed": seed,
        "variant": variant,
        "wandb": {"enabled": True, "mode": "offline", "project": "prefpipe-test"},
    }


def start_stage(out: Path, config: dict) -> None:
    record = RunRecord(out, "train_reward", config)
    record.log(step=1, loss=0.5)
    record.finish({"accuracy": 0.75})


def test_offline_run_has_group_job_type_tags_and_an_id_a_requeue_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "reward" / "gpm"
    start_stage(out, stage_config())
    start_stage(out, stage_config())  # the simulated requeue: the same stage of the same run starts again
    files = sorted(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2
    first, second = (run_record_of(f) for f in files)
    assert first.run_id == second.run_id
    assert first.run_group == "tiny-seed3"
    assert first.job_type == "reward"
    assert first.display_name == "tiny/train_reward/gpm/seed3"
    assert list(first.tags) == ["gpm", "reward", "tiny"]
    assert first.run_id == wandb_identity("train_reward", stage_config(), out).id


def test_ids_differ_by_seed_stage_and_member_and_not_by_folder(tmp_path):
    base = wandb_identity("train_reward", stage_config(), tmp_path / "a" / "gpm")
    moved = wandb_identity("train_reward", stage_config(), tmp_path / "moved" / "gpm")
    assert base == moved
    others = {
        wandb_identity("train_reward", stage_config(seed=4), tmp_path).id,
        wandb_identity("train_reward", stage_config(variant="bt"), tmp_path).id,
        wandb_identity("eval_rewardbench", stage_config(), tmp_path).id,
    }
    assert base.id not in others and len(others) == 3
    assert wandb_identity("eval_rewardbench", stage_config(seed=4), tmp_path).group == "tiny-seed4"
    assert len(base.id) <= 64 and base.id.replace("-", "").isalnum()


def test_one_per_run_stage_names_no_member(tmp_path):
    config = {k: v for k, v in stage_config().items() if k != "variant"}
    assert wandb_identity("report", config, tmp_path / "report").name == "tiny/report/seed3"
    assert wandb_identity("prep_data", config, tmp_path / "data").name == "tiny/prep_data/seed3"
