"""Length-disentangled training (ODIN: Chen et al., "ODIN: Disentangled Reward Mitigates Hacking in RLHF",
ICML 2024) for any registered head: an option (`head.length_head`), not a head type.

ODIN, as its paper and its authors' code (Lichang-Chen/ODIN `two_head_rw.py` + `step2-reward-modeling/main.py`,
RLHFlow `odin/gemma_two_head.py`) define it, for a BT model with a quality head r_Q = w_Q.h and a length head
r_L = w_L.h on the same features h:
    ranking    L_R = -log sigmoid((r(c) - r(r)) / tau),  r = r_Q + r_L            (the sum is trained)
    length     L_L = (1 - rho(r_L, L)) + |rho(r_Q, L)|                            (rho: Pearson over the
               batch's responses, chosen and rejected together; L = response length)
    orthogonal L_O = |<w_Q, w_L>| / (|w_Q| |w_L|)
    total      L_R + lambda_L L_L + lambda_O L_O;  scoring (and RL) use r_Q only.
The authors' first code also adds |rho(r_Q + r_L, L)| at the same weight; RLHFlow's script does not, nor
does this. ODIN uses one weight for both correlation terms (1 in RLHFlow's script); here `length_weight` weighs
1 - rho(r_L, L) and `decorrelation_weight` weighs |rho(quality, L)| (equal weights are ODIN). ODIN's code
centres the weight rows before normalising; this is the plain cosine. ODIN all-gathers the batch across GPUs;
here rho runs over each process's micro-batch (2 x train.micro_batch_size responses), and over all pairs in a
full-batch head fit. L is the response length in characters (prefpipe.data.pair_length, the measure every
length figure of the evaluation uses; ODIN counts tokens; Pearson is unchanged by the scale).

Pairwise heads (GPM, Bayesian GPM) have no per-response reward, so the same idea takes this form:
- the length head is the same scalar r_L = w_L.h, and its term enters the pair's training score:
  s_train(c > r) = s(c > r | x) + r_L(c) - r_L(r). A length preference is transitive and scalar, so a BT term
  carries all of it; the skew-symmetric GPM part is then free to spend its capacity on the rest. At scoring
  the term is dropped: s = s(c > r | x), as for BT.
- the decorrelation acts on what the head scores, the pair score s_i = s(c_i > r_i) (the posterior mean's for
  the Bayesian GPM), against the length difference d_i = L(c_i) - L(r_i): rho_pair = sum s d / sqrt(sum s^2
  sum d^2), the Pearson correlation of the pairs taken in both orders {(s_i, d_i), (-s_i, -d_i)} (both sets
  have mean 0 by skew-symmetry). It does not depend on which response is the chosen one, so it penalises the
  use of length, not the labels; for BT it is the correlation of reward differences with length differences.
- orthogonality: the mean of |cos(w_i, w_L)| over the head's projection rows w_i (BT: its one row, which is
  ODIN's term; GPM: the 2k embedding rows; Bayesian GPM: the 2k rows of the mean half).

Options (head.length_head; the defaults are ODIN's form). Why: Pearson is scale-free in r, so its gradient
    d rho(r, L) / d r_i = (Lhat_i - rho rhat_i) / ||r - mean r||     (hats: centred, unit-norm vectors)
has norm sqrt(1 - rho^2) / ||r - mean r||, large while the rewards' spread is small (a short fine-tune never
leaves that regime), and |rho| keeps that full size at rho = 0 with a sign set by the noise of a 2n-response
estimate (sd about 1 / sqrt(2n - 1)). On real_small the penalty's gradient set the clipped step (docs/findings/FINDINGS.md).
- decorrelation: `abs` D = |rho| (ODIN) | `squared` D = rho^2, gradient 2 rho d rho: smooth, and small at
  noise-level rho (E[rho_hat^2] = rho^2 + Var rho_hat is still least at rho = 0).
- decorrelation `covariance`: D = cov(x, z)^2 = rho^2 Var x, z the standardised length (x: rewards, or the pair
  scores in both orders): gradient 2 cov(x, z) (z_i - mean z) / N, along the length direction only and of the
  rewards' own scale (no 1 / spread); it removes the length component of x and leaves its other spread alone.
- follow `residual`: F = Var r_L (1 - rho(r_L, L)^2) = mean((r_L - mean r_L)^2) - cov(r_L, z)^2, the variance of
  the length head that length does not explain, in place of 1 - rho(r_L, L): its gradient
  2 (r_L,i - mean r_L - cov(r_L, z) z_i) / N removes r_L's non-length part and leaves its length part (its size
  and sign) to the ranking loss; no 1 / spread. With `covariance` the two terms split r's variance: the length
  head keeps what length explains, the scored head what it does not.
- warmup_steps W: the three weighted terms are multiplied by min(1, t / W) at optimizer step t (W = 0: 1), so
  the ranking loss spreads the rewards before the correlations' 1 / spread gradients act. Like the Bayesian KL
  warm-up, a full-batch head fit runs at one optimizer step's weight: a fit before training (step 0) has none.
- length_scale: `chars` L = characters | `log` L = log(1 + characters): Pearson is linear in L, and characters
  are heavy-tailed (a few long replies set rho); the pair form then reads d_i = log((1 + L_c) / (1 + L_r)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from prefpipe.data.pair_length import response_length
from prefpipe.reward.losses import linear_warmup

if TYPE_CHECKING:
    from prefpipe.reward.heads.base import Encoding, RewardHead
    from prefpipe.settings.reward import LengthHeadSettings

LENGTH_KEY = "response_length"  # each row's response length; the trainer adds it to the train-mode outputs
LENGTH_REWARD_KEY = "length_reward"  # the length head's r_L per row (train mode and eval mode alike)
EPS = 1e-8


class LengthHead(nn.Module):
    """r_L = w_L . h: one linear map of the head's (standardised) input, no bias (a bias cancels in every
    pair and in every correlation)."""

    def __init__(self, input_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, input_size))
        nn.init.normal_(self.weight, std=input_size**-0.5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h @ self.weight.to(h.dtype).T).squeeze(-1)


def pair_lengths(chosen: Sequence[str], rejected: Sequence[str]) -> torch.Tensor:
    """(2, N) float32: L of each pair's chosen (row 0) and rejected (row 1) response, in characters."""
    return torch.tensor(
        [[response_length(t) for t in chosen], [response_length(t) for t in rejected]], dtype=torch.float32
    )


def split_pairs(out: Encoding, lengths: torch.Tensor) -> tuple[Encoding, Encoding]:
    """Train-mode outputs of n chosen rows then n rejected rows, split in two, each with its rows' lengths
    (`lengths` (2, n): what pair_lengths gives for these pairs)."""
    n = lengths.shape[1]
    lengths = lengths.to(next(iter(out.values())).device, non_blocking=True)
    out_c = {k: v[:n] for k, v in out.items()} | {LENGTH_KEY: lengths[0]}
    return out_c, {k: v[n:] for k, v in out.items()} | {LENGTH_KEY: lengths[1]}


def pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of two 1-D tensors; 0 when either is constant (no length signal to follow)."""
    xc, yc = x - x.mean(), y - y.mean()
    return (xc * yc).sum() / (xc.norm() * yc.norm()).clamp_min(EPS)


def orthogonality(rows: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean over the rows r_i of |cos(r_i, w)| (rows (m, F), w (1, F) or (F,))."""
    w = w.reshape(-1)
    cos = rows @ w / (rows.norm(dim=-1) * w.norm()).clamp_min(EPS)
    return cos.abs().mean()


def covariance_z(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """cov(x, z), z = (y - mean y) / sd(y) (population moments): rho(x, y) sd(x), in x's units."""
    xc, yc = x - x.mean(), y - y.mean()
    return (xc * yc).mean() / yc.square().mean().sqrt().clamp_min(EPS)


def unexplained_variance(r: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Var r (1 - rho(r, y)^2) = mean(rc^2) - cov(r, z)^2: the variance of r that y does not explain."""
    return (r - r.mean()).square().mean() - covariance_z(r, y).square()


Term = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# head.length_head.length_scale: the length the correlations use (characters or log(1 + characters)).
LENGTH_SCALES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"chars": lambda n: n, "log": torch.log1p}
# head.length_head.follow: the length head's term F(r_L, L): 1 - rho (ODIN) or the variance length leaves.
FOLLOW_FORMS: dict[str, Term] = {
    "pearson": lambda r, y: 1.0 - pearson(r, y),
    "residual": unexplained_variance,
}
# head.length_head.decorrelation: the scored head's term D(x, L): |rho| (ODIN), rho^2 or cov(x, z)^2 (rho^2 var x).
DECORRELATIONS: dict[str, Term] = {
    "abs": lambda x, y: pearson(x, y).abs(),
    "squared": lambda x, y: pearson(x, y).square(),
    "covariance": lambda x, y: covariance_z(x, y).square(),
}


def form(table: dict[str, Callable], key: str, value: str) -> Callable:
    """table[value], or an error naming head.length_head.<key> and the known values."""
    if value not in table:
        raise ValueError(f"head.length_head.{key}: {value!r}, expected one of {sorted(table)}")
    return table[value]


def quality_pairs(
    head: RewardHead, out_c: Encoding, out_r: Encoding, length_c: torch.Tensor, length_r: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the decorrelation reads: (rewards, lengths) of the 2n responses for a scalar head (ODIN), the
    pairs in both orders (cat[s, -s], cat[d, -d]) for a pairwise one (their Pearson is rho_pair)."""
    if head.scalar_reward:
        rewards = torch.cat([head.rewards(out_c), head.rewards(out_r)])
        return rewards, torch.cat([length_c, length_r])
    score, _ = head.score(out_c, out_r)
    d = length_c - length_r
    return torch.cat([score, -score]), torch.cat([d, -d])


def length_penalty(
    head: RewardHead, out_c: Encoding, out_r: Encoding, settings: LengthHeadSettings, step: int
) -> torch.Tensor:
    """ramp(step) [length_weight F(r_L, L) + decorrelation_weight D(quality, L) + orthogonal_weight L_O],
    F = 1 - rho or Var r_L (1 - rho^2) (`follow`), D = |rho|, rho^2 or cov^2 (`decorrelation`), L in
    characters or log(1 + characters) (`length_scale`)."""
    for name, out in (("out_c", out_c), ("out_r", out_r)):
        missing = [k for k in (LENGTH_KEY, LENGTH_REWARD_KEY) if k not in out]
        if missing:
            raise ValueError(
                f"length-disentangled loss: {name} lacks {missing} (lengths reach the loss here)"
            )
    scale = form(LENGTH_SCALES, "length_scale", settings.length_scale)
    length_c, length_r = scale(out_c[LENGTH_KEY].float()), scale(out_r[LENGTH_KEY].float())
    length_rewards = torch.cat([out_c[LENGTH_REWARD_KEY], out_r[LENGTH_REWARD_KEY]])
    follows = form(FOLLOW_FORMS, "follow", settings.follow)(length_rewards, torch.cat([length_c, length_r]))
    quality = quality_pairs(head, out_c, out_r, length_c, length_r)
    avoid = form(DECORRELATIONS, "decorrelation", settings.decorrelation)(*quality)
    ortho = orthogonality(head.projection_rows(), head.length_head_module().weight)
    ramp = linear_warmup(step, settings.warmup_steps)
    return ramp * (
        settings.length_weight * follows
        + settings.decorrelation_weight * avoid
        + settings.orthogonal_weight * ortho
    )
