"""Length-disentangled training (ODIN; prefpipe.reward.heads.disentangle) for BT, GPM and the Bayesian GPM:
the loss against an independent numpy computation, a training on pairs whose labels are confounded by length,
the real trainer with a length head (lengths reach the loss; the saved model scores with the quality head only),
and config errors that name the key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support.models import build_reward, save_tiny_base
from support.rows import rps_pairs
from support.settings import reward_settings, tiny_reward_settings

from prefpipe.common.config import ConfigError
from prefpipe.reward.head_fit import CachedFeatures, fit_head
from prefpipe.reward.heads.disentangle import LENGTH_KEY, LENGTH_REWARD_KEY, pair_lengths
from prefpipe.reward.heads.registry import build_head
from prefpipe.reward.model import load_reward_model, save_reward_model
from prefpipe.reward.pairs import Pair
from prefpipe.reward.spec import HEAD_CONFIG, ModelSpec
from prefpipe.reward.trainer import RewardTrainer

WEIGHTS = {"length_weight": 0.7, "decorrelation_weight": 1.3, "orthogonal_weight": 0.4}


def _head_settings(head_type: str, enabled: bool = True, options: dict | None = None, **head):
    length = {"enabled": enabled, **WEIGHTS, **(options or {})} if enabled else {"enabled": False}
    return tiny_reward_settings(head_type, head={"gate": False, "length_head": length, **head}).head


def _softplus(x):
    return np.logaddexp(0.0, x)


def _gpm_score(a, b):
    return sum(a[:, 2 * k] * b[:, 2 * k + 1] - a[:, 2 * k + 1] * b[:, 2 * k] for k in range(a.shape[1] // 2))


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _numpy_loss(head_type, head, h, lengths, settings, step):
    """ODIN's terms, computed from the head's weights with numpy (np.corrcoef for every correlation), with the
    options: log(1 + chars) lengths, rho^2 instead of |rho|, a linear ramp of the three weights."""
    length = settings.length_head
    lengths = np.log1p(lengths) if length.length_scale == "log" else lengths
    n = h.shape[0] // 2
    w_len = head.length_head.weight.detach().double().numpy().reshape(-1)
    r_len = h @ w_len
    rows = head.projection_rows().detach().double().numpy()
    kl = 0.0
    if head_type == "bt":
        r_q = h @ rows[0] + float(head.value_head.bias.detach())
        score_q = r_q[:n] - r_q[n:]
        x_q = r_q
        rho_q = np.corrcoef(r_q, lengths)[0, 1]
    else:
        raw = h @ head.value_head.weight.detach().double().numpy().T
        emb = _unit(raw[:, : rows.shape[0]])
        score_q = _gpm_score(emb[:n], emb[n:])
        d = lengths[:n] - lengths[n:]  # both orders of every pair: {(s, d), (-s, -d)}
        x_q = np.concatenate([score_q, -score_q])
        rho_q = np.corrcoef(x_q, np.concatenate([d, -d]))[0, 1]
        if head_type == "bgpm":
            b = settings.bayes
            low, high = b.logvar_clamp
            logvar = raw[:, rows.shape[0] :] + head.logvar_bias.detach().double().numpy()
            logvar = np.clip(logvar, low, high)
            var = np.exp(logvar)
            p = b.prior_variance
            kl_rows = 0.5 * ((var + emb**2) / p - 1 - np.log(var / p)).sum(1)
            kl = min(1.0, step / b.kl_warmup_steps) * b.max_kl_weight * (kl_rows[:n] + kl_rows[n:]).mean()
    score = score_q + r_len[:n] - r_len[n:]
    ranking = _softplus(-score / settings.tau).mean() + kl
    rho_len = np.corrcoef(r_len, lengths)[0, 1]
    follow = np.var(r_len) * (1 - rho_len**2) if length.follow == "residual" else 1 - rho_len
    cos = [abs(row @ w_len) / (np.linalg.norm(row) * np.linalg.norm(w_len)) for row in rows]
    ortho = float(np.mean(cos))
    avoid = {"abs": abs(rho_q), "squared": rho_q**2, "covariance": rho_q**2 * np.var(x_q)}[
        length.decorrelation
    ]
    ramp = min(1.0, step / length.warmup_steps) if length.warmup_steps else 1.0
    penalty = length.length_weight * follow + length.decorrelation_weight * avoid
    return ranking + ramp * (penalty + length.orthogonal_weight * ortho), ranking


OPTIONS = [
    {},  # ODIN's form (the defaults)
    {"decorrelation": "squared", "length_scale": "log", "warmup_steps": 4},  # step 3: 0.75 of the weights
    {"decorrelation": "squared", "warmup_steps": 2},  # past the ramp: full weights
    {"decorrelation": "covariance", "follow": "residual", "length_scale": "log"},
]


@pytest.mark.parametrize(
    "options", OPTIONS, ids=["odin", "squared-log-ramp", "squared-ramp-done", "covariance-residual-log"]
)
@pytest.mark.parametrize("head_type", ["bt", "gpm", "bgpm"])
def test_the_loss_is_odins_terms_computed_independently(head_type, options):
    settings = _head_settings(head_type, options=options, tau=0.7, dim=4, standardize=False)
    torch.manual_seed(1)
    head = build_head(settings, 6, 5)
    head.eval()  # the Bayesian head scores its posterior means (no samples), so numpy can follow it
    g = np.random.default_rng(0)
    n = 12
    h = g.normal(size=(2 * n, 6))
    lengths = g.integers(5, 400, size=2 * n).astype(float)
    out = head.encode_features(torch.tensor(h, dtype=torch.float32), torch.zeros(2 * n, 5))
    assert LENGTH_REWARD_KEY in out
    out_c = {k: v[:n] for k, v in out.items()} | {LENGTH_KEY: torch.tensor(lengths[:n])}
    out_r = {k: v[n:] for k, v in out.items()} | {LENGTH_KEY: torch.tensor(lengths[n:])}
    parts = head.loss(out_c, out_r, step=3)
    total, ranking = _numpy_loss(head_type, head, h, lengths, settings, step=3)
    assert float(parts.loss.detach()) == pytest.approx(total, rel=1e-5)
    assert float(parts.preference_loss + parts.kl_beta * parts.kl_loss) == pytest.approx(ranking, rel=1e-5)
    assert float(parts.loss.detach()) - ranking > 0.05  # the length terms are there, and weigh something
    # Scoring reads the quality head only: the length head leaves compare() unchanged.
    score, _ = head.compare(out_c, out_r)
    without = {k: v for k, v in out_c.items() if k != LENGTH_REWARD_KEY}
    torch.testing.assert_close(score, head.compare(without, out_r)[0])


def _world(n: int, length_bias: float, seed: int):
    """Quality q and length L independent per response (features: q, log L, a constant, noise); labels follow
    q and, with `length_bias`, the log-length difference too (an annotator who favours longer replies)."""
    g = np.random.default_rng(seed)
    q, length = g.normal(size=(2, n)), g.lognormal(5.0, 0.6, size=(2, n))
    logit = 3.0 * (q[0] - q[1]) + length_bias * np.log(length[0] / length[1]) / 0.6
    first = g.random(n) < 1 / (1 + np.exp(-logit))
    order = np.stack([np.where(first, 0, 1), np.where(first, 1, 0)])  # chosen row, rejected row
    q, length = np.take_along_axis(q, order, 0), np.take_along_axis(length, order, 0)
    h = g.normal(size=(2, n, 8))
    h[..., 0], h[..., 1], h[..., 2] = q, np.log(length) - 5.0, 1.0
    t = torch.tensor(np.concatenate([h[0], h[1]]), dtype=torch.float32)
    return t, torch.tensor(length, dtype=torch.float32)


class _Features:
    """What fit_head asks of a reward model: its head and score_features (no backbone: fixed features)."""

    def __init__(self, head):
        self.head = head

    def score_features(self, pooled, prompt):
        return self.head.encode_features(self.head.standardize(pooled), prompt)


def _fit_and_measure(
    head_type: str, enabled: bool, options: dict | None = None
) -> tuple[float, float, float]:
    settings = _head_settings(head_type, enabled, options, dim=4, standardize=False)
    torch.manual_seed(0)
    head = build_head(settings, 8, 4)
    h, lengths = _world(600, length_bias=3.0, seed=1)
    feats = CachedFeatures(h, torch.zeros(h.shape[0], 4), lengths)
    fit = fit_head(_Features(head), feats, 600, 3e-2, step=0, schedule="constant")
    head.eval()
    h, lengths = _world(3000, length_bias=0.0, seed=2)  # held out; the labels no longer follow length
    n = lengths.shape[1]
    with torch.no_grad():
        out = head.encode_features(h, torch.zeros(2 * n, 4))
        enc_c, enc_r = ({k: v[i * n : (i + 1) * n] for k, v in out.items()} for i in (0, 1))
        score, _ = head.compare(enc_c, enc_r)
    accuracy = float((score > 0).float().mean())
    if head.scalar_reward:  # the reward-length correlation over the scored responses
        corr = np.corrcoef(torch.cat([head.rewards(enc_c), head.rewards(enc_r)]), lengths.reshape(-1))[0, 1]
    else:  # the pair score against the length difference, both orders of each pair
        d = (lengths[0] - lengths[1]).numpy()
        corr = np.corrcoef(np.concatenate([score, -score]), np.concatenate([d, -d]))[0, 1]
    return fit["accuracy_end"], accuracy, abs(float(corr))


# real_small's form: no 1/spread gradient (docs/reference/CONFIGURATION.md); its weights, as the penalty has the rewards' scale
SCALE_AWARE = {"follow": "residual", "decorrelation": "covariance", "length_scale": "log"}
SCALE_AWARE |= {
    "warmup_steps": 0,  # the fit runs at optimizer step 0, where a ramp would switch the terms off
    "length_weight": 10.0,
    "decorrelation_weight": 10.0,
    "orthogonal_weight": 1.0,
}


@pytest.mark.parametrize("options", [None, SCALE_AWARE], ids=["odin", "scale-aware"])
@pytest.mark.parametrize("head_type", ["bt", "gpm", "bgpm"])
def test_a_length_confound_leaves_the_quality_head_and_accuracy_holds(head_type, options):
    """Train labels favour the longer reply (the longer one is chosen in 73% of train pairs); held-out labels do not.
    Plain training learns length (|corr| about 0.6); the disentangled quality head does not (|corr| < 0.1),
    fits the training pairs as well (its training score is quality + length) and scores held-out pairs better."""
    _, lengths = _world(600, length_bias=3.0, seed=1)
    assert float((lengths[0] > lengths[1]).float().mean()) > 0.7  # the confound
    fit_plain, acc_plain, corr_plain = _fit_and_measure(head_type, False)
    fit_odin, acc_odin, corr_odin = _fit_and_measure(head_type, True, options)
    assert corr_plain > 0.4 and corr_odin < 0.1, (corr_plain, corr_odin)
    assert fit_odin >= fit_plain - 0.02, (fit_plain, fit_odin)
    assert acc_odin >= acc_plain + 0.05, (acc_plain, acc_odin)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.mark.parametrize("head_type", ["bt", "gpm"])
def test_the_trainer_feeds_lengths_to_the_loss_and_the_saved_model_scores_quality_only(
    tiny_base, tmp_path, head_type
):
    rows = rps_pairs()
    pairs = [Pair(r["id"], r["prompt"], r["chosen"], r["rejected"], r["subset"]) for r in rows]
    length = {"enabled": True, **WEIGHTS}
    rm, settings = build_reward(tiny_base, head_type, head={"length_head": length})
    result = RewardTrainer(rm, settings, pairs, tmp_path / "run").train()
    assert result.steps == settings.train.steps
    # loss = ranking + the length terms, which are positive whenever the length head is not perfect
    assert all(row["loss"] > row["preference_loss"] for row in result.history)
    torch.testing.assert_close(
        pair_lengths([p.chosen for p in pairs], [p.rejected for p in pairs]),
        torch.tensor([[len(p.chosen) for p in pairs], [len(p.rejected) for p in pairs]], dtype=torch.float32),
    )
    save_reward_model(rm, tmp_path / "model")
    loaded = load_reward_model(tmp_path / "model").eval()
    assert loaded.spec.head.length_head == settings.head.length_head
    assert loaded.head.length_head_module() is not None
    # a folder saved before the length head's options loads with ODIN's form
    data = json.loads((tmp_path / "model" / HEAD_CONFIG).read_text())
    for key in ("follow", "decorrelation", "warmup_steps", "length_scale"):
        del data["head"]["length_head"][key]
    old = ModelSpec.from_json(data).head.length_head
    assert (old.follow, old.decorrelation, old.warmup_steps, old.length_scale) == (
        "pearson",
        "abs",
        0,
        "chars",
    )
    prompts, chosen = [p.prompt for p in pairs], [p.chosen for p in pairs]
    enc = loaded.encode(prompts, chosen, 8)
    assert LENGTH_REWARD_KEY not in enc  # the length head is never part of an encoding
    rm.eval()
    torch.testing.assert_close(rm.encode(prompts, chosen, 8), enc)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"length_head.*enabled"):
        reward_settings({"head": {"length_head": {"enabled": "yes"}}})
    with pytest.raises(ConfigError, match=r"length_head.*decorrelation_weight"):
        reward_settings({"head": {"length_head": {"decorrelation_weight": -1.0}}})
    with pytest.raises(ConfigError, match=r"length_head.*decorrelation"):
        reward_settings({"head": {"length_head": {"decorrelation": "cube"}}})
    with pytest.raises(ConfigError, match=r"length_head.*follow"):
        reward_settings({"head": {"length_head": {"follow": "spearman"}}})
    with pytest.raises(ConfigError, match=r"length_head.*length_scale"):
        reward_settings({"head": {"length_head": {"length_scale": "tokens"}}})
    with pytest.raises(ConfigError, match=r"length_head.*warmup_steps"):
        reward_settings({"head": {"length_head": {"warmup_steps": -1}}})
    with pytest.raises(ConfigError, match=r"length_head.*strength"):
        reward_settings({"head": {"length_head": {"strength": 1.0}}})


def test_a_head_without_projection_rows_cannot_carry_a_length_head():
    from prefpipe.reward.heads.base import RewardHead
    from prefpipe.reward.heads.bt import BTHead
    from prefpipe.reward.heads.registry import HEADS, register

    class Opaque(BTHead):  # a scalar head that does not say which rows map features to its score
        projection_rows = RewardHead.projection_rows

    register("opaque_test")(Opaque)
    try:
        with pytest.raises(ConfigError, match=r"head\.length_head\.enabled: the 'opaque_test' head"):
            _head_settings("opaque_test")  # the settings layer runs the registry's checks
        settings = _head_settings("opaque_test", enabled=False)  # without a length head: fine
        settings.length_head.enabled = True
        with pytest.raises(ConfigError, match=r"head\.length_head\.enabled"):
            build_head(settings, 4, 4)  # and so does building a head
    finally:
        HEADS.pop("opaque_test")
