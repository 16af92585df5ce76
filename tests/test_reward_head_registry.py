"""The head registry: a head registered here, in the test, trains, saves, loads and scores through the normal
model-building path (settings -> build_reward_model -> RewardTrainer -> load_reward_model -> evaluation and
GRPO), with no other source file knowing about it."""

from __future__ import annotations

import json

import pytest
import torch
from support.eval_args import EVAL
from support.models import build_reward as build
from support.models import save_tiny_base
from support.settings import reward_settings, reward_spec
from torch import nn

from prefpipe.common.config import ConfigError
from prefpipe.evaluation.pair_scoring import score_pairs
from prefpipe.grpo.rewards import RewardInputs, build_rewards
from prefpipe.reward.heads.base import RewardHead, require
from prefpipe.reward.heads.registry import HEADS, get_head_class, register
from prefpipe.reward.model import load_reward_model, save_reward_model
from prefpipe.reward.pairs import Pair
from prefpipe.reward.sanity_accuracy import pair_accuracy
from prefpipe.reward.trainer import RewardTrainer

PROMPTS = ["Play!", "Your move?", "Please be polite.", "What is 2 plus 3?"]
GOOD, BAD = "Sure, here you go.", "I cannot help with that."


class ZeroInitScalarHead(RewardHead):
    """Throwaway head: a scalar reward whose weights start at zero, so every response starts at reward 0."""

    encoding_keys = ("reward",)
    scalar_reward = True

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def check_settings(cls, settings) -> None:
        require(not settings.gate, "head.gate", "a scalar head has no prompt gate; set it to false")

    @classmethod
    def from_settings(cls, settings, input_size: int, prompt_size: int) -> ZeroInitScalarHead:
        return cls(input_size)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"reward": self.value_head(h).squeeze(-1)}

    @classmethod
    def score(cls, enc_a, enc_b):
        return enc_a["reward"] - enc_b["reward"], None

    @classmethod
    def training_score(cls, out_c, out_r) -> torch.Tensor:
        return out_c["reward"] - out_r["reward"]

    @classmethod
    def rewards(cls, enc) -> torch.Tensor:
        return enc["reward"]


def _encode_good_bad(model):
    """GOOD and BAD answered to every prompt, each encoded at the eval stage's batch size."""
    return tuple(model.encode(PROMPTS, [answer] * 4, EVAL.batch_size) for answer in (GOOD, BAD))


@pytest.fixture(scope="module")
def zero_head():
    register("zero_scalar")(ZeroInitScalarHead)
    yield ZeroInitScalarHead
    HEADS.pop("zero_scalar")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


def test_builtin_heads_and_their_capabilities():
    assert {"bt", "gpm", "bgpm"} <= set(HEADS)
    flags = {name: (HEADS[name].scalar_reward, HEADS[name].bayesian) for name in ("bt", "gpm", "bgpm")}
    assert flags == {"bt": (True, False), "gpm": (False, False), "bgpm": (False, True)}
    with pytest.raises(ConfigError, match=r"head\.type.*'gpn'.*known heads: .*bgpm, bt, gpm"):
        get_head_class("gpn")
    with pytest.raises(TypeError, match="no scalar per-response reward"):
        HEADS["gpm"].rewards({"embedding": torch.zeros(1, 2)})


def test_a_registered_head_is_checked_by_the_settings(zero_head):
    assert get_head_class("zero_scalar") is zero_head
    with pytest.raises(
        ConfigError, match=r"reward\.variants\.gpm\.head\.gate: a scalar head has no prompt gate"
    ):
        reward_settings({"head": {"type": "zero_scalar"}})
    assert reward_settings({"head": {"type": "zero_scalar", "gate": False}}).head.type == "zero_scalar"


def test_a_registered_head_trains_saves_loads_and_scores(zero_head, tiny_base, tmp_path):
    train = {
        "steps": 12,
        "batch_size": 4,
        "micro_batch_size": 2,
        "learning_rate": 1e-3,
        "head_learning_rate": 0.1,
        "head_fit": {"before_steps": 0, "after_steps": 0},  # the loop alone trains the head here
    }
    rm, settings = build(tiny_base, "zero_scalar", head={"gate": False}, train=train)
    assert isinstance(rm.head, zero_head) and rm.scalar_reward and not rm.bayesian
    rm.eval()
    start, _ = rm.compare(*_encode_good_bad(rm))
    assert torch.equal(start, torch.zeros(4))  # the head's own init, not the BT head's

    pairs = [Pair(f"p{i}", p, GOOD, BAD, "polite") for i, p in enumerate(PROMPTS)]
    result = RewardTrainer(rm, settings, pairs, tmp_path / "run").train()
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert pair_accuracy(rm.eval(), pairs, batch_size=32)["overall"] == 1.0

    save_reward_model(rm, tmp_path / "model")
    assert json.loads((tmp_path / "model" / "head_config.json").read_text())["head_type"] == "zero_scalar"
    loaded = load_reward_model(tmp_path / "model")
    assert isinstance(loaded.head, zero_head) and loaded.head_type == "zero_scalar"
    enc_good, enc_bad = _encode_good_bad(loaded)
    score, var = loaded.compare(enc_good, enc_bad)
    assert var is None and (score > 0).all()
    torch.testing.assert_close(loaded.preference_prob(enc_good, enc_bad), torch.sigmoid(score / loaded.tau))

    scores = score_pairs(loaded, PROMPTS, [GOOD] * 4, [BAD] * 4, batch_size=3)
    assert scores.variance is None
    # float32 rounding of another batch composition: a few ulp of scores that training made large (about 40)
    torch.testing.assert_close(torch.from_numpy(scores.score).float(), score, atol=1e-5, rtol=1e-6)

    inputs = RewardInputs(PROMPTS[:2] * 2, [GOOD, BAD, BAD, GOOD], ["x"] * 4, ["add"] * 4, [True] * 4, 2)
    (reward,) = build_rewards([reward_spec("reward_model")], loaded)
    want = loaded.rewards(loaded.encode(inputs.prompts, inputs.completions, EVAL.batch_size))
    torch.testing.assert_close(reward.fn(inputs), want)  # a scalar head pays its own reward, not a group mean
    with pytest.raises(ConfigError, match="risk_aversion needs a Bayesian reward model"):
        build_rewards([reward_spec("reward_model", risk_aversion=1.0)], loaded)
