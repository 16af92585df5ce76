"""prefpipe.common.checkpoint: the one checkpoint layout (atomic step folders, fingerprint guard, resume, and
cleanup of the temporary folder on any failure) that the reward and GRPO trainers share."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from prefpipe.common import checkpoint as ckpt
from prefpipe.common.config import ConfigError


def _write_files(payload: dict):
    def write(tmp: Path) -> None:
        torch.save(payload, tmp / "state.pt")
        (tmp / "records.json").write_text(json.dumps(payload["records"]))

    return write


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".") or "tmp" in p.name)


@pytest.fixture
def first(tmp_path) -> Path:
    """A root with one good checkpoint at step 1."""
    root = tmp_path / "checkpoints"
    ckpt.save_checkpoint(root, 1, "fp", _write_files({"w": torch.ones(3), "records": [1]}))
    return root


def test_save_writes_a_complete_step_folder_and_resume_finds_the_newest(first):
    assert ckpt.find_latest(first) == first / "step-00000001"
    folder = ckpt.save_checkpoint(first, 7, "fp", _write_files({"w": torch.zeros(3), "records": [1, 2]}))
    assert folder == ckpt.step_folder(first, 7) == first / "step-00000007"
    sizes = {
        "records.json": (folder / "records.json").stat().st_size,
        "state.pt": (folder / "state.pt").stat().st_size,
    }
    assert ckpt.read_meta(folder) == {"step": 7, "fingerprint": "fp", "files": sizes}
    assert json.loads((first / "latest.json").read_text()) == {"step": 7, "path": "step-00000007"}
    assert sorted(p.name for p in first.iterdir()) == ["latest.json", "step-00000007"]  # older one pruned
    assert ckpt.check_fingerprint(first, "fp") == folder
    assert torch.equal(torch.load(folder / "state.pt", weights_only=True)["w"], torch.zeros(3))
    ckpt.remove_checkpoints(first)
    assert (
        not first.exists() and ckpt.find_latest(first) is None and ckpt.check_fingerprint(first, "fp") is None
    )


def test_checkpoint_of_another_run_is_refused_naming_the_folder(first):
    with pytest.raises(ckpt.CheckpointMismatch) as info:
        ckpt.check_fingerprint(first, "other", hint=", or set train.resume: never")
    assert isinstance(info.value, ConfigError)  # stages exit 2 on it
    message = str(info.value)
    assert str(first / "step-00000001") in message and "different config" in message
    assert f"Delete {first} to start afresh, or set train.resume: never" in message


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot serialise this state")


def test_a_save_that_raises_mid_write_leaves_no_temp_folder_and_the_previous_checkpoint_intact(first):
    before = _tree(first)
    # torch.save fails half way through state.pt: one error naming the step folder and the cause
    with pytest.raises(ckpt.CheckpointWriteError, match="cannot serialise") as info:
        ckpt.save_checkpoint(
            first, 2, "fp", _write_files({"w": torch.ones(2), "bad": Unpicklable(), "records": []})
        )
    assert str(first / "step-00000002") in str(info.value) and "step-00000001 is intact" in str(info.value)
    assert _leftovers(first) == []
    assert _tree(first) == before and ckpt.find_latest(first) == first / "step-00000001"


def test_sigterm_during_the_write_cleans_up_and_exits_143(first):
    before, previous = _tree(first), signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a plain process

    def write(tmp: Path) -> None:
        (tmp / "part.bin").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the signal is handled between bytecodes, here at the latest
            (tmp / "more.bin").write_bytes(b"x")
        raise AssertionError("SIGTERM was not raised during the write")

    try:
        with pytest.raises(SystemExit) as info:
            ckpt.save_checkpoint(first, 2, "fp", write)
        assert info.value.code == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the temporary handler is gone
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _leftovers(first) == [] and _tree(first) == before


def test_a_trainer_sigterm_handler_is_left_alone_and_the_write_completes(first):
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:

        def write(tmp: Path) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            (tmp / "state.bin").write_bytes(b"whole")

        folder = ckpt.save_checkpoint(first, 2, "fp", write)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIGTERM] and (folder / "state.bin").read_bytes() == b"whole"


def test_a_temp_folder_left_by_a_killed_process_is_never_resumed_and_is_replaced(first):
    stale = first / ".step-00000002.tmp"
    stale.mkdir()
    (stale / "checkpoint.json").write_text(json.dumps({"step": 2, "fingerprint": "fp"}))
    assert ckpt.find_latest(first) == first / "step-00000001"
    ckpt.save_checkpoint(first, 2, "fp", lambda tmp: (tmp / "new.bin").write_bytes(b"new"))
    assert _leftovers(first) == [] and (first / "step-00000002" / "new.bin").exists()


def test_legacy_reward_checkpoints_still_resume(tmp_path):
    """Reward checkpoints written before checkpoint.json kept step and fingerprint in trainer_state.json."""
    legacy = tmp_path / "step-00000004"
    legacy.mkdir()
    (legacy / "trainer_state.json").write_text(json.dumps({"step": 4, "fingerprint": "fp", "history": []}))
    assert ckpt.check_fingerprint(tmp_path, "fp") == legacy


def test_fingerprint_ignores_bookkeeping_keys_only():
    settings = {"seed": 1, "eval": {"batch_size": 8}, "train": {"lr": 1e-3, "checkpoint_every": 5}}
    ignore = ("eval", "train.checkpoint_every", "absent", "train.absent.deeper")
    fp = ckpt.fingerprint(settings, {"base": "b"}, ignore=ignore)
    bookkeeping = {**settings, "eval": {"batch_size": 3}, "train": {"lr": 1e-3, "checkpoint_every": 9}}
    assert ckpt.fingerprint(bookkeeping, {"base": "b"}, ignore=ignore) == fp
    assert ckpt.fingerprint({**settings, "seed": 2}, {"base": "b"}, ignore=ignore) != fp
    assert ckpt.fingerprint(settings, {"base": "c"}, ignore=ignore) != fp
    assert settings["train"] == {"lr": 1e-3, "checkpoint_every": 5}  # the caller's mapping is not modified
    # Same hash as the reward trainer's fingerprints before the shared module: its checkpoints still resume.
    old = {"seed": 1, "train": {"lr": 1e-3}, "inputs": {"base": "b"}}
    assert fp == hashlib.sha256(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:16]


def test_content_digest_is_order_sensitive_and_matches_the_old_row_digests():
    rows = [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q"}]
    assert ckpt.content_digest(rows) != ckpt.content_digest(rows[::-1])
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
    assert ckpt.content_digest(rows) == h.hexdigest()[:16]


def test_a_flat_grpo_checkpoint_of_the_older_layout_is_refused_by_name(tmp_path):
    """GRPO checkpoints used to lie flat in <out>/checkpoint/ (fingerprints of another form): never resumed, never
    silently ignored."""
    (tmp_path / "state.pt").write_bytes(b"old")
    (tmp_path / "checkpoint.json").write_text(json.dumps({"step": 3, "fingerprint": "old-form"}))
    assert ckpt.find_latest(tmp_path) == tmp_path
    with pytest.raises(ckpt.CheckpointMismatch, match=f"checkpoint {tmp_path} was written"):
        ckpt.check_fingerprint(tmp_path, "fp")
