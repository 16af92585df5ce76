"""backbone.compile and backbone.kernels (common/torch_runtime/kernels.py): torch.compile trains the same model
as the eager forward, in place (the state dict keeps its keys, the saved model loads back); Liger's kernels are
refused off CUDA and by name, and their loss and gradients are checked on a GPU by benchmarks/device_check.py
(they are Triton kernels: nothing here can run them).

The compiled run is inductor on this CPU (C++ code generated for the tiny base's graph, about a minute of
compiling): every step's loss within 1e-5 relative of the eager run on the same seed, and the trained models'
P(chosen > rejected) within 1e-4 after 3 steps (the generated kernels sum in another order than ATen's)."""

from __future__ import annotations

import pytest
import torch
import yaml
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs
from test_reward_train import _pairs

from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.kernels import COMPILE_MODES, KERNELS, apply_kernels, compile_backbone
from prefpipe.reward.model import load_reward_model, save_reward_model
from prefpipe.reward.trainer import RewardTrainer
from prefpipe.settings.schema import schema_dir

# a small learning rate: Adam turns float rounding in near-zero gradients (the BT bias's is zero in exact
# arithmetic) into steps of the learning rate's size
TRAIN = {"steps": 3, "batch_size": 4, "micro_batch_size": 4, "learning_rate": 1e-4, "head_learning_rate": 1e-4,
         "head_fit": {"after_steps": 0}}  # fmt: skip


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def _train(base, out, compile_mode: str):
    rm, settings = build_reward(
        base, "bt", backbone={"compile": compile_mode}, head={"standardize": False}, train=TRAIN
    )
    trainer = RewardTrainer(rm, settings, _pairs(rps_pairs())[:12], out)
    result = trainer.train()
    return rm, [row["loss"] for row in result.history], trainer.execution


@pytest.fixture(scope="module")
def eager_and_compiled(tiny_base, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return _train(tiny_base, out / "eager", "none"), _train(tiny_base, out / "compiled", "default")


def test_compiled_backbone_trains_the_same_model_as_eager(eager_and_compiled):
    (eager, eager_losses, eager_exec), (compiled, compiled_losses, compiled_exec) = eager_and_compiled
    assert eager_exec == {"kernels": "none", "compile": "none"}
    assert compiled_exec == {"kernels": "none", "compile": "default"}
    assert len(compiled_losses) == len(eager_losses) == 3
    for a, b in zip(eager_losses, compiled_losses, strict=True):
        assert b == pytest.approx(a, rel=1e-5)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # compiled in place: no _orig_mod prefix
    gap = (_probabilities(compiled) - _probabilities(eager)).abs().max().item()
    print(f"largest P(chosen > rejected) difference after 3 steps, compiled vs eager: {gap:.2e}")
    assert gap < 1e-4


def _probabilities(rm) -> torch.Tensor:
    pairs = _pairs(rps_pairs())[:12]
    prompts = [p.prompt for p in pairs]
    with torch.no_grad():
        a = rm.eval().encode(prompts, [p.chosen for p in pairs], batch_size=12)
        b = rm.encode(prompts, [p.rejected for p in pairs], batch_size=12)
        return rm.compare(a, b)[0]


def test_a_compiled_model_saves_and_loads_back(eager_and_compiled, tmp_path):
    _, (compiled, _, _) = eager_and_compiled
    folder = save_reward_model(compiled, tmp_path / "model")
    loaded = load_reward_model(folder)
    for key, value in compiled.state_dict().items():
        assert torch.equal(loaded.state_dict()[key].float(), value.float()), key


def test_liger_is_refused_off_cuda_and_unknown_names_are_refused():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(
        ConfigError,
        match=r"^backbone.kernels: liger runs Triton kernels on a CUDA device, and this run is on cpu",
    ):
        apply_kernels(model, "liger", torch.device("cpu"))
    with pytest.raises(
        ConfigError, match=r"^backbone.kernels: 'fast' is not a kernel set \(known: none, liger\)"
    ):
        apply_kernels(model, "fast", torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"^backbone.compile: 'on' is not a mode"):
        compile_backbone(model, "on")
    assert apply_kernels(model, "none", torch.device("cpu")) == "none"
    assert compile_backbone(model, "none") is False


def test_schema_enums_are_the_registries():
    schema = yaml.safe_load((schema_dir() / "reward.schema.yaml").read_text())
    backbone = schema["$defs"]["settings"]["properties"]["backbone"]["properties"]
    assert backbone["kernels"]["enum"] == list(KERNELS)
    assert backbone["compile"]["enum"] == list(COMPILE_MODES)
