"""Device resolution (the config's `device` keys) and the `ran_on` record every stage leaves in versions.json."""

from __future__ import annotations

import json

import pytest
import torch

from prefpipe.common.config import ConfigError
from prefpipe.common.run_record import RunRecord
from prefpipe.common.torch_runtime.device import ran_on, resolve_device

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the CPU-only answers")


@needs_no_cuda
def test_auto_is_the_cpu_without_cuda_and_cuda_by_name_is_refused_naming_the_key():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"base\.device is 'cuda:1' but no CUDA device"):
        resolve_device("cuda:1", "base.device")


def test_a_name_that_is_no_device_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"eval\.device: 'gpu0' is not a device"):
        resolve_device("gpu0", "eval.device")


@needs_no_cuda
def test_a_finished_stage_records_the_device_it_ran_on(tmp_path):
    torch.ones(2) @ torch.ones(2)  # torch work on the CPU
    record = RunRecord(tmp_path / "stage", "unit", {"experiment": "x"})
    before = json.loads((tmp_path / "stage" / "versions.json").read_text())
    assert "ran_on" not in before  # known only at the end
    record.finish({"ok": True})
    versions = json.loads((tmp_path / "stage" / "versions.json").read_text())
    assert versions["ran_on"] == {"device": "cpu"} == ran_on()
    assert {k: v for k, v in versions.items() if k != "ran_on"} == before
