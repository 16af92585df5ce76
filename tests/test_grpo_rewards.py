"""Reward functions: rule rewards by hand, reward-model rewards against explicit pairwise loops on real
(tiny, untrained) prefpipe reward models built from a tiny Llama folder."""

from __future__ import annotations

import pytest
import torch
from support.models import save_tiny_policy
from support.settings import reward_settings, reward_spec

from prefpipe.common.config import ConfigError
from prefpipe.grpo.rewards import (
    REWARD_SOURCES,
    RewardInputs,
    WeightedReward,
    build_rewards,
    compute_rewards,
    group_pair_index,
    needs_reference_completions,
    token_f1,
)

PROMPTS = ["What is 2 plus 3?", "Say yes."]
COMPLETIONS = ["5", "6", "five", "5 apples", "yes", "no", "yes yes", "Yes."]
G = 4
RM_BATCH_SIZE = reward_spec("reward_model")["batch_size"]  # the reward_model reward's own encoding batch size


def inputs(**over) -> RewardInputs:
    base = dict(
        prompts=[p for p in PROMPTS for _ in range(G)],
        completions=list(COMPLETIONS),
        answers=["5"] * G + ["yes"] * G,
        kinds=["add"] * G + ["repeat"] * G,
        terminated=[True, True, True, False, True, True, True, True],
        group_size=G,
    )
    base.update(over)
    return RewardInputs(**base)


def test_rule_rewards_by_hand():
    got = {
        w.name: w.fn(inputs()).tolist()
        for w in build_rewards(
            [
                reward_spec("verifier"),
                reward_spec("exact_match"),
                reward_spec("token_f1"),
                reward_spec("format", pattern=r"\S+"),
            ]
        )
    }
    assert got["verifier"] == [1, 0, 0, 0, 1, 0, 0, 0]
    assert got["exact_match"] == [1, 0, 0, 0, 1, 0, 0, 1]  # SQuAD normalisation: "Yes." == "yes"
    assert got["token_f1"] == pytest.approx([1, 0, 0, 2 / 3, 1, 0, 2 / 3, 1])
    assert got["format"] == [1, 1, 1, 0, 1, 1, 0, 1]  # "5 apples" ran out of tokens, "yes yes" has a space


def test_token_f1_matches_hand_computation():
    # pred tokens [cat, sat, mat], ref [cat, on, mat]: common 2, P = R = 2/3
    assert token_f1("The cat sat, mat!", "a cat on the mat") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


def test_weighted_sum_and_bad_values():
    rewards = [
        WeightedReward("a", 2.0, lambda i: torch.ones(8)),
        WeightedReward("b", -0.5, lambda i: torch.arange(8.0)),
    ]
    total, parts = compute_rewards(rewards, inputs())
    assert total.tolist() == [2.0 - 0.5 * k for k in range(8)]
    assert set(parts) == {"a", "b"}
    with pytest.raises(ValueError, match="'nan'.*non-finite"):
        compute_rewards([WeightedReward("nan", 1.0, lambda i: torch.full((8,), float("nan")))], inputs())


def test_a_gated_reward_pays_only_where_its_gate_is_positive():
    # verifier on COMPLETIONS: [1, 0, 0, 0, 1, 0, 0, 0]; the gated reward 0.5 * (k + 1) counts on positions 0 and 4
    specs = [reward_spec("verifier"), reward_spec("format", name="style", weight=0.5, gate="verifier")]
    built = build_rewards(specs)
    built[1].fn = lambda i: torch.arange(1.0, 9.0)
    total, parts = compute_rewards(built, inputs())
    assert total.tolist() == [1 + 0.5 * 1, 0, 0, 0, 1 + 0.5 * 5, 0, 0, 0]
    assert parts["style"].tolist() == list(
        range(1, 9)
    )  # raw values stay ungated (the hacking series reads them)
    # no completion right: nothing but the (zero) verifier reaches the total, whatever the gated reward says
    total, _ = compute_rewards(built, inputs(answers=["7"] * G + ["maybe"] * G))
    assert total.tolist() == [0.0] * 8


def test_gate_errors_name_the_key():
    with pytest.raises(
        ConfigError, match=r"grpo.rewards\[1\].gate 'nope' must name another reward.*\['verifier'\]"
    ):
        build_rewards([reward_spec("verifier"), reward_spec("format", gate="nope")])
    with pytest.raises(ConfigError, match=r"grpo.rewards\[0\].gate 'verifier' must name another"):
        build_rewards([reward_spec("verifier", gate="verifier")])
    with pytest.raises(ConfigError, match=r"grpo.rewards\[2\].gate 'format' is itself gated"):
        build_rewards(
            [
                reward_spec("verifier"),
                reward_spec("format", gate="verifier"),
                reward_spec("token_f1", gate="format"),
            ]
        )


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"grpo.rewards\[0\].type"):
        build_rewards([reward_spec("bleu")])
    with pytest.raises(ConfigError, match=r"grpo.rewards\[0\] \(reward_model\): .*no --reward-model"):
        build_rewards([reward_spec("reward_model")])
    with pytest.raises(ConfigError, match="used twice"):
        build_rewards([reward_spec("verifier"), reward_spec("verifier")])
    with pytest.raises(ConfigError, match=r"grpo.rewards\[1\] \(format\) lacks \['name', 'pattern'\]"):
        build_rewards([reward_spec("verifier"), {"type": "format", "weight": 1.0}])


def test_specs_are_complete_and_name_null_means_the_type():
    built = build_rewards([reward_spec("verifier"), reward_spec("verifier", name="again", weight=0.5)])
    assert [(w.name, w.weight) for w in built] == [("verifier", 1.0), ("again", 0.5)]
    assert not needs_reference_completions([reward_spec("verifier"), reward_spec("reward_model")])
    assert needs_reference_completions([reward_spec("reward_model", opponent="reference")])


def test_a_new_reward_source_is_one_registered_factory(monkeypatch):
    from prefpipe.grpo.rewards import register_reward_source

    monkeypatch.setattr("prefpipe.grpo.rewards.REWARD_SOURCES", dict(REWARD_SOURCES))
    register_reward_source("length")(
        lambda spec, rm: lambda inputs: torch.tensor([float(len(c)) for c in inputs.completions])
    )
    (length,) = build_rewards([reward_spec("length", weight=2.0)])
    assert length.fn(inputs()).tolist() == [float(len(c)) for c in COMPLETIONS]


def test_group_pair_index_is_all_ordered_pairs_within_groups():
    first, second = group_pair_index(6, 3)
    pairs = list(zip(first.tolist(), second.tolist(), strict=True))
    assert pairs == [
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 2),
        (2, 0),
        (2, 1),
        (3, 4),
        (3, 5),
        (4, 3),
        (4, 5),
        (5, 3),
        (5, 4),
    ]


# ------------------------------------------------------------------------------ real reward models


@pytest.fixture(scope="module")
def backbone_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("rm_base"), seed=11, chat_template=False)


def _rm(backbone_dir, head: dict):
    """An untrained reward model of the default `head["type"]` variant with `head` merged over it."""
    from prefpipe.reward.model import build_reward_model

    settings = reward_settings({"head": head, "data": {"max_length": 64}}, variant=head["type"])
    torch.manual_seed(0)
    return build_reward_model(str(backbone_dir), settings).eval()


def _rm_reward(rm, **spec):
    """The reward_model reward built the normal way, from a complete spec."""
    (reward,) = build_rewards([reward_spec("reward_model", **spec)], rm)
    return reward.fn


def _score(rm, prompt: str, a: str, b: str) -> tuple[float, float | None]:
    """Independent path: encode each completion on its own, compare one pair."""
    score, var = rm.compare(rm.encode([prompt], [a], RM_BATCH_SIZE), rm.encode([prompt], [b], RM_BATCH_SIZE))
    return float(score[0]), None if var is None else float(var[0])


def test_bt_reward_is_the_scalar_reward(backbone_dir):
    rm = _rm(backbone_dir, {"type": "bt"})
    got = _rm_reward(rm)(inputs()).tolist()
    want = [
        float(rm.encode([p], [c], RM_BATCH_SIZE)["reward"][0])
        for p, c in zip(inputs().prompts, COMPLETIONS, strict=True)
    ]
    assert got == pytest.approx(want, abs=1e-5)


def test_gpm_reward_is_mean_preference_over_the_group(backbone_dir):
    rm = _rm(backbone_dir, {"type": "gpm", "dim": 4})
    got = _rm_reward(rm)(inputs()).tolist()
    want = []
    for g in range(2):
        for i in range(G):
            others = [
                _score(rm, PROMPTS[g], COMPLETIONS[g * G + i], COMPLETIONS[g * G + j])[0]
                for j in range(G)
                if j != i
            ]
            want.append(sum(others) / len(others))
    assert got == pytest.approx(want, abs=1e-5)
    assert abs(sum(got[:G])) < 1e-5  # skew symmetry: group-relative rewards sum to zero
    sig = _rm_reward(rm, transform="sigmoid")(inputs())
    assert ((sig > 0) & (sig < 1)).all()
    # sigmoid(s) + sigmoid(-s) = 1: each group's mean is 0.5 at every step (grpo.hacking.mean_fixed_by_construction)
    assert sig.view(2, G).mean(dim=1).tolist() == pytest.approx([0.5, 0.5], abs=1e-6)


def test_bgpm_risk_averse_reward_subtracts_lambda_std(backbone_dir):
    rm = _rm(backbone_dir, {"type": "bgpm", "dim": 4, "bayes": {}})
    lam = 0.7
    got = _rm_reward(rm, risk_aversion=lam)(inputs()).tolist()
    want = []
    for g in range(2):
        for i in range(G):
            vals = []
            for j in range(G):
                if j != i:
                    s, v = _score(rm, PROMPTS[g], COMPLETIONS[g * G + i], COMPLETIONS[g * G + j])
                    vals.append(s - lam * v**0.5)
            want.append(sum(vals) / len(vals))
    assert got == pytest.approx(want, abs=1e-5)
    plain = _rm_reward(rm)(inputs())
    assert (torch.tensor(got) < plain).all()  # the posterior has variance, so every reward drops


def test_reference_opponent_and_risk_aversion_needs_bgpm(backbone_dir):
    rm = _rm(backbone_dir, {"type": "gpm", "dim": 4})
    refs = ["5"] * G + ["yes"] * G
    got = _rm_reward(rm, opponent="reference")(inputs(reference_completions=refs)).tolist()
    want = [_score(rm, p, c, r)[0] for p, c, r in zip(inputs().prompts, COMPLETIONS, refs, strict=True)]
    assert got == pytest.approx(want, abs=1e-5)
    assert got[0] == pytest.approx(0.0, abs=1e-6)  # s(y > y) = 0
    with pytest.raises(
        ConfigError, match=r"grpo.rewards\[0\] \(reward_model\): risk_aversion needs a Bayesian"
    ):
        _rm_reward(rm, risk_aversion=0.5)
