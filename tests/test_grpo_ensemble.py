"""A deep ensemble as GRPO's reward (reward/ensemble.py through grpo/rewards.py): on real tiny reward models, the
reward against each member scored one pair at a time with mean and sample sd by numpy; a penalty constant within
groups (BT members that differ by a constant) leaves every advantage as it was; the risk diagnostics; both stages
given the members' folders; and the config errors, each naming its key."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from support.models import build_reward, save_tiny_policy
from support.reward_inputs import COMPLETIONS, REFS, G, group_inputs
from support.rows import rl_rows
from support.settings import TINY_GRPO_RUN, grpo_settings, pipeline, reward_settings, reward_spec, stage_json
from support.stages import run_main

from prefpipe import eval_policy, train_grpo
from prefpipe.common.config import ConfigError
from prefpipe.common.io import write_jsonl
from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.analyses import risk
from prefpipe.grpo.rewards import build_rewards, compute_rewards
from prefpipe.reward.ensemble import EnsembleRewardModel

LAM = 0.7
SIZE = reward_spec("reward_model")["batch_size"]
TINY = {"data": {"max_length": 64}}
ENSEMBLE = {"reward": {"variants": {"gpm-seed1": {"seed": 1}}, "only": None}}


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("ens_base"), seed=11, chat_template=False)


def _members(backbone, head: str, seeds=(0, 1, 2), **head_settings):
    return [build_reward(backbone, head, seed=s, head=head_settings, **TINY)[0].eval() for s in seeds]


def _reward(ensemble, **spec):
    (reward,) = build_rewards([reward_spec("reward_model", name="rm", **spec)], ensemble)
    return reward


def _member_scores(members, prompt: str, a: str, b: str) -> np.ndarray:
    """Each member's s_m(a > b | x), the pair encoded on its own (the independent path)."""
    return np.array(
        [
            float(m.compare(m.encode([prompt], [a], SIZE), m.encode([prompt], [b], SIZE))[0][0])
            for m in members
        ]
    )


@pytest.mark.parametrize("opponent", ["reference", "group"])
def test_pairwise_ensemble_reward_is_mean_minus_k_sample_sd(backbone, opponent):
    members = _members(backbone, "gpm", dim=4)
    reward = _reward(EnsembleRewardModel(members, ["a", "b", "c"]), opponent=opponent, risk_aversion=LAM)
    _, parts = compute_rewards([reward], group_inputs())
    scores, penalties = [], []
    for i, (prompt, text) in enumerate(zip(group_inputs().prompts, COMPLETIONS, strict=True)):
        group = range(i // G * G, i // G * G + G)
        others = [REFS[i]] if opponent == "reference" else [COMPLETIONS[j] for j in group if j != i]
        per_pair = [_member_scores(members, prompt, text, other) for other in others]
        scores.append(np.mean([s.mean() for s in per_pair]))
        penalties.append(np.mean([LAM * s.std(ddof=1) for s in per_pair]))
    assert sum(p > 0 for p in penalties) >= 6  # the members disagree (s(y > y) = 0 for every member)
    assert parts["rm"].tolist() == pytest.approx(np.subtract(scores, penalties).tolist(), abs=1e-5)
    s, p = np.reshape(scores, (-1, G)), np.reshape(penalties, (-1, G))
    p_sd, s_sd = p.std(axis=1, ddof=1).mean(), s.std(axis=1, ddof=1).mean()
    got = risk.step_metrics([reward], G, lambda rows: rows)
    assert got == pytest.approx(
        {
            "risk/rm_penalty_mean": p.mean(),
            "risk/rm_penalty_group_sd": p_sd,
            "risk/rm_score_group_sd": s_sd,
            "risk/rm_spread_ratio": p_sd / s_sd,
        },
        rel=1e-4,
    )


def test_scalar_ensemble_pays_mean_reward_minus_k_sd(backbone):
    members = _members(backbone, "bt")
    ensemble = EnsembleRewardModel(members, ["a", "b", "c"])
    assert ensemble.scalar_reward and ensemble.bayesian
    each = np.array(
        [
            [float(m.encode([p], [c], SIZE)["reward"][0]) for m in members]
            for p, c in zip(group_inputs().prompts, COMPLETIONS, strict=True)
        ]
    )
    got = _reward(ensemble, risk_aversion=LAM).fn(group_inputs()).tolist()
    assert got == pytest.approx((each.mean(axis=1) - LAM * each.std(axis=1, ddof=1)).tolist(), abs=1e-5)
    assert _reward(ensemble).fn(group_inputs()).tolist() == pytest.approx(
        each.mean(axis=1).tolist(), abs=1e-5
    )


def test_a_penalty_constant_within_groups_changes_no_advantage(backbone):
    """Two BT members that differ only by a constant c in the head's bias: sd_m r_m = |c| / sqrt(2) for every
    completion, so the risk-averse rewards are the k = 0 ones shifted by a constant and no advantage moves."""
    first = _members(backbone, "bt", seeds=(0,))[0]
    second = copy.deepcopy(first)
    with torch.no_grad():
        second.head.value_head.bias += 0.5
    ensemble = EnsembleRewardModel([first, second], ["a", "b"])
    plain = _reward(ensemble).fn(group_inputs())
    averse = _reward(ensemble, risk_aversion=LAM)
    paid = averse.fn(group_inputs())
    assert (plain - paid).tolist() == pytest.approx([LAM * 0.5 / 2**0.5] * 8, abs=1e-5)
    for mode in ("group", "none"):
        want = group_advantages(plain, G, mode, 1e-4).advantages
        assert torch.allclose(group_advantages(paid, G, mode, 1e-4).advantages, want, atol=1e-5)
    got = risk.step_metrics([averse], G, lambda rows: rows)
    assert got["risk/rm_penalty_group_sd"] < 1e-5 and got["risk/rm_spread_ratio"] < 1e-4


def test_ensemble_members_must_be_point_heads_with_one_tau(backbone):
    gpm = _members(backbone, "gpm", seeds=(0,), dim=4)[0]
    bgpm = _members(backbone, "bgpm", seeds=(0,), dim=4)[0]
    with pytest.raises(ConfigError, match="member b is a Bayesian head"):
        EnsembleRewardModel([gpm, bgpm], ["a", "b"])
    other_tau = _members(backbone, "gpm", seeds=(1,), dim=4, tau=gpm.tau * 2)[0]
    with pytest.raises(ConfigError, match="member b has tau"):
        EnsembleRewardModel([gpm, other_tau], ["a", "b"])
    with pytest.raises(ConfigError, match="K >= 2"):
        EnsembleRewardModel([gpm], ["a"])


def test_both_stages_read_the_members_folders(backbone, tmp_path):
    from prefpipe.reward.model import build_reward_model, save_reward_model

    data = tmp_path / "data"
    write_jsonl(data / "rl_prompts_train.jsonl", rl_rows())
    write_jsonl(data / "rl_prompts_heldout.jsonl", rl_rows())
    folders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        rm = build_reward_model(str(backbone), reward_settings({"head": {"dim": 4}, **TINY}))
        save_reward_model(rm, tmp_path / f"rm{seed}")
        folders.append(tmp_path / f"rm{seed}")
    run = {
        **TINY_GRPO_RUN,
        "reward_model": "ens",
        "rewards": [{"type": "reward_model", "weight": 1.0, "risk_aversion": LAM}],
        "eval": {"max_new_tokens": 6, "batch_size": 4, "kl_estimate": False, "curve_every": 0},
    }
    ensembles = {"ens": ["gpm", "gpm-seed1"]}
    config = stage_json(grpo_settings(run, run="gpm", seed=0, eval={"ensembles": ensembles}, **ENSEMBLE))
    out, ev = tmp_path / "grpo", tmp_path / "policy_eval"
    paths = {"data": data, "reward_model": folders}
    assert run_main(train_grpo.main, config, policy=backbone, out=out, **paths)[0] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward_model"] == [str(f) for f in folders]
    assert summary["risk_penalty"]["reward_model"]["all_steps"]["penalty_mean"] > 0
    assert run_main(eval_policy.main, config, base=backbone, policy=out / "policy", out=ev, **paths)[0] == 0
    block = json.loads((ev / "summary.json").read_text())["reward_model"]
    assert block["head_type"] == "ensemble(gpm, gpm)" and block["mean_score_std"] > 0


def _run(reward_model: str, risk_aversion: float = 0.0, **top) -> dict:
    spec = {"type": "reward_model", "weight": 1.0, "opponent": "reference", "risk_aversion": risk_aversion}
    return {
        "grpo": {"only": ["rm_gpm"], "runs": {"rm_gpm": {"reward_model": reward_model, "rewards": [spec]}}},
        **top,
    }


def test_a_run_may_name_an_ensemble_and_be_risk_averse_on_it():
    settings = pipeline(ENSEMBLE, _run("ens", 1.0, eval={"ensembles": {"ens": ["gpm", "gpm-seed1"]}}))
    assert settings.grpo["rm_gpm"].reward_model == "ens"


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        (
            _run("nope"),
            r"grpo.runs.rm_gpm.reward_model = 'nope' is not in reward.variants .* nor in eval.ensembles",
        ),
        (
            _run("gpm", 1.0),
            r"grpo.runs.rm_gpm.rewards\[0\].risk_aversion = 1.0 needs a Bayesian .* 'gpm' head",
        ),
        (
            _run("mix", eval={"ensembles": {"mix": ["gpm", "bgpm"]}}),
            r"grpo.runs.rm_gpm.reward_model = 'mix': member 'bgpm' .* is a Bayesian head",
        ),
        (
            _run("bt", eval={"ensembles": {"bt": ["gpm", "gpm-seed1"]}}),
            r"grpo.runs.rm_gpm.reward_model = 'bt' names both a reward variant and an eval.ensembles entry",
        ),
    ],
)
def test_config_errors_name_the_key(overlay, message):
    with pytest.raises(ConfigError, match=message):
        pipeline(ENSEMBLE, overlay)


def test_the_information_risk_measure_on_an_ensemble_is_refused_naming_the_key():
    overlay = _run("ens", 1.0, eval={"ensembles": {"ens": ["gpm", "gpm-seed1"]}})
    overlay["grpo"]["runs"]["rm_gpm"]["rewards"][0]["risk_measure"] = "mutual_information"
    with pytest.raises(ConfigError, match=r"rewards\[0\].risk_measure = mutual_information reads a Bayesian"):
        pipeline(ENSEMBLE, overlay)
