"""A risk-averse reward's penalty spread (grpo/analyses/risk.py) against hand computations: the per-completion score and
penalty from a real tiny Bayesian GPM scored one pair at a time, group sds with numpy, and the fact the
diagnostic exists for: a penalty constant within each group leaves group-relative advantages unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.models import save_tiny_policy
from support.reward_inputs import COMPLETIONS, REFS, G, group_inputs
from support.settings import reward_settings, reward_spec

from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.analyses import risk
from prefpipe.grpo.rewards import build_rewards, compute_rewards

LAM = 0.7


@pytest.fixture(scope="module")
def bgpm(tmp_path_factory):
    from prefpipe.reward.model import build_reward_model

    backbone = save_tiny_policy(tmp_path_factory.mktemp("rm_base"), seed=11, chat_template=False)
    settings = reward_settings({"head": {"dim": 4}, "data": {"max_length": 64}}, variant="bgpm")
    torch.manual_seed(0)
    return build_reward_model(str(backbone), settings).eval()


def _pair(rm, prompt: str, a: str, b: str) -> tuple[float, float]:
    """One comparison encoded on its own: (posterior-mean score, sd)."""
    size = reward_spec("reward_model")["batch_size"]
    score, var = rm.compare(rm.encode([prompt], [a], size), rm.encode([prompt], [b], size))
    return float(score[0]), float(var[0]) ** 0.5


def _expected(scores: list[float], penalties: list[float]) -> dict[str, float]:
    s, p = np.array(scores).reshape(-1, G), np.array(penalties).reshape(-1, G)
    p_sd, s_sd = p.std(axis=1, ddof=1).mean(), s.std(axis=1, ddof=1).mean()
    return {
        "risk/rm_penalty_mean": p.mean(),
        "risk/rm_penalty_group_sd": p_sd,
        "risk/rm_score_group_sd": s_sd,
        "risk/rm_spread_ratio": p_sd / s_sd,
    }


@pytest.mark.parametrize("opponent", ["reference", "group"])
def test_step_metrics_match_a_hand_computation(bgpm, opponent):
    spec = reward_spec("reward_model", name="rm", opponent=opponent, risk_aversion=LAM)
    rewards = build_rewards([spec], bgpm)
    _, parts = compute_rewards(rewards, group_inputs())
    scores, penalties = [], []
    for i, (prompt, text) in enumerate(zip(group_inputs().prompts, COMPLETIONS, strict=True)):
        group = range(i // G * G, i // G * G + G)
        others = [REFS[i]] if opponent == "reference" else [COMPLETIONS[j] for j in group if j != i]
        pairs = [_pair(bgpm, prompt, text, other) for other in others]
        scores.append(np.mean([s for s, _ in pairs]))
        penalties.append(np.mean([LAM * sd for _, sd in pairs]))
    got = risk.step_metrics(rewards, G, lambda rows: rows)
    assert got == pytest.approx(_expected(scores, penalties), rel=1e-4)
    # the reward itself is score - penalty (no transform)
    assert parts["rm"].tolist() == pytest.approx(np.subtract(scores, penalties).tolist(), abs=1e-5)


def test_no_metrics_without_risk_aversion(bgpm):
    rewards = build_rewards([reward_spec("reward_model", opponent="reference")], bgpm)
    compute_rewards(rewards, group_inputs())
    assert risk.step_metrics(rewards, G, lambda rows: rows) == {}


def test_a_penalty_constant_within_groups_changes_no_advantage():
    score = torch.tensor([0.3, -1.0, 2.0, 0.5, 1.0, 1.5, -0.5, 0.0])
    penalty = torch.tensor([0.2] * 4 + [0.9] * 4)  # differs between prompts only
    for mode in ("group", "none"):
        plain = group_advantages(score, G, mode, 1e-4).advantages
        averse = group_advantages(score - penalty, G, mode, 1e-4).advantages
        assert torch.allclose(plain, averse, atol=1e-6)
    got = risk.risk_metrics("rm", score, penalty, G)
    assert got["risk/rm_penalty_group_sd"] == 0.0 and got["risk/rm_spread_ratio"] == 0.0
    assert got["risk/rm_penalty_mean"] == pytest.approx(0.55)
    assert risk.risk_metrics("rm", torch.ones(8), penalty, G)["risk/rm_spread_ratio"] is None


def test_run_summary_by_hand():
    rows = [
        {
            "step": s,
            "risk/rm_penalty_mean": 0.1 * s,
            "risk/rm_penalty_group_sd": 0.01 * s,
            "risk/rm_score_group_sd": 0.5,
        }
        for s in range(7)
    ]
    block = risk.risk_summary(rows)["rm"]
    assert block["window"] == 5
    assert block["first_steps"]["penalty_mean"] == pytest.approx(0.2)  # steps 0..4
    assert block["last_steps"]["penalty_group_sd"] == pytest.approx(0.04)  # steps 2..6
    assert block["last_steps"]["spread_ratio"] == pytest.approx(0.04 / 0.5)
    assert block["all_steps"]["spread_ratio"] == pytest.approx(0.03 / 0.5)
    assert risk.risk_summary([{"step": 0, "reward_mean": 1.0}]) is None


@pytest.mark.parametrize(
    "sd", [0.02, 0.3, 2.5]
)  # sigma = sd / tau: 0.2, 3, 25 (Gauss-Hermite, then the grid)
def test_predictive_information_matches_monte_carlo_and_the_evaluation(sd):
    from prefpipe.evaluation.uncertainty import gaussian_preference
    from prefpipe.grpo.risk_measures import predictive_information

    tau = 0.1
    score = torch.tensor([-0.4, 0.0, 0.05, 0.7], dtype=torch.float64)
    var = torch.full_like(score, sd**2)
    prob, info = predictive_information(score, var, tau)
    draws = score[:, None] + sd * torch.randn(
        4, 400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    p = torch.sigmoid(draws / tau)
    entropy = lambda q: -(q * q.clamp_min(1e-300).log() + (1 - q) * (1 - q).clamp_min(1e-300).log())  # noqa: E731
    mc_prob = p.mean(1)
    assert prob.numpy() == pytest.approx(mc_prob.numpy(), abs=3e-3)
    assert info.numpy() == pytest.approx((entropy(mc_prob) - entropy(p).mean(1)).numpy(), abs=3e-3)
    reference = gaussian_preference(score.numpy(), var.numpy(), tau)
    assert prob.numpy() == pytest.approx(reference["prob"], abs=1e-6)
    assert info.numpy() == pytest.approx(reference["mutual_information"], abs=1e-6)


@pytest.mark.parametrize("opponent", ["reference", "group"])
def test_the_information_measure_pays_predictive_probability_minus_k_information(bgpm, opponent):
    from prefpipe.evaluation.uncertainty import gaussian_preference

    spec = reward_spec("reward_model", name="rm", opponent=opponent, risk_aversion=LAM)
    rewards = build_rewards([{**spec, "risk_measure": "mutual_information"}], bgpm)
    _, parts = compute_rewards(rewards, group_inputs())
    expected = []
    for i, (prompt, text) in enumerate(zip(group_inputs().prompts, COMPLETIONS, strict=True)):
        group = range(i // G * G, i // G * G + G)
        others = [REFS[i]] if opponent == "reference" else [COMPLETIONS[j] for j in group if j != i]
        pairs = np.array([_pair(bgpm, prompt, text, other) for other in others])
        g = gaussian_preference(pairs[:, 0], pairs[:, 1] ** 2, bgpm.tau)
        expected.append(np.mean(g["prob"] - LAM * g["mutual_information"]))
    assert parts["rm"].tolist() == pytest.approx(expected, abs=1e-5)


def test_the_information_measure_refuses_a_sigmoid_transform_and_an_ensemble(bgpm, tmp_path):
    from prefpipe.common.config import ConfigError
    from prefpipe.grpo.rewards import RewardModelReward

    with pytest.raises(ConfigError, match="transform must be none"):
        RewardModelReward(bgpm, opponent="group", risk_aversion=1.0, transform="sigmoid", batch_size=4,
                          risk_measure="mutual_information")  # fmt: skip

    from prefpipe.reward.ensemble import EnsembleRewardModel
    from prefpipe.reward.model import build_reward_model

    backbone = save_tiny_policy(tmp_path / "base", seed=11, chat_template=False)
    settings = reward_settings({"head": {"dim": 4}, "data": {"max_length": 64}}, variant="gpm")
    ensemble = EnsembleRewardModel(
        [build_reward_model(str(backbone), settings).eval() for _ in range(2)], ["a", "b"]
    )
    with pytest.raises(ConfigError, match="deep ensemble"):
        RewardModelReward(ensemble, opponent="group", risk_aversion=1.0, transform="none", batch_size=4,
                          risk_measure="mutual_information")  # fmt: skip


def test_the_information_measure_at_k_zero_pays_the_predictive_probability(bgpm):
    from prefpipe.evaluation.uncertainty import gaussian_preference

    spec = {
        **reward_spec("reward_model", name="rm", opponent="reference"),
        "risk_measure": "mutual_information",
    }
    rewards = build_rewards([spec], bgpm)
    _, parts = compute_rewards(rewards, group_inputs())
    inputs = group_inputs()
    pairs = np.array(
        [_pair(bgpm, p, t, r) for p, t, r in zip(inputs.prompts, COMPLETIONS, REFS, strict=True)]
    )
    expected = gaussian_preference(pairs[:, 0], pairs[:, 1] ** 2, bgpm.tau)["prob"]
    assert parts["rm"].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert risk.step_metrics(rewards, G, lambda rows: rows) == {}  # no penalty, no risk diagnostics
