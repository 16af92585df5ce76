"""Bayesian GPM head: a diagonal Gaussian posterior over the GPM embedding.

Linear(H, 2 * 2k) -> (raw_mean, logvar); mean = normalize(raw_mean); samples only in train mode. The score
uses the posterior mean (closed-form variance alongside), training uses samples plus beta(t) * KL to the prior
(the math is in prefpipe.reward.losses), and P(a > b) = E[sigmoid(s / tau)] for s ~ N(score, variance), integrated
by the evaluation's own code (prefpipe.common.expected_sigmoid), so training, evaluation and export give one P.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from prefpipe.common.expected_sigmoid import gaussian_preference_prob
from prefpipe.reward.heads.base import Encoding, require
from prefpipe.reward.heads.gpm import GPMHead
from prefpipe.reward.heads.registry import register
from prefpipe.reward.losses import LossParts, gaussian_kl, kl_beta, kl_mean_term
from prefpipe.reward.scores import (
    gpm_score,
    gpm_score_variance,
    pair_gate,
    sample_embedding,
)

if TYPE_CHECKING:
    from prefpipe.settings.reward import BayesSettings, HeadSettings


@register("bgpm")
class BayesianGPMHead(GPMHead):
    encoding_keys = ("mean", "var", "gate")

    def __init__(
        self,
        input_size: int,
        prompt_size: int,
        dim: int,
        normalize: bool,
        gate: bool,
        settings: BayesSettings,
    ) -> None:
        super().__init__(input_size, prompt_size, dim, normalize, gate)
        self.value_head = nn.Linear(input_size, 2 * dim, bias=False)
        self.dim = dim
        self.clamp = settings.logvar_clamp
        # logvar fix (weights): shrink the logvar half so logvar barely depends on the input at init
        with torch.no_grad():
            self.value_head.weight[dim:, :].mul_(settings.logvar_init_scale)
        # logvar fix (offset): the weight scaling alone leaves logvar ~ 0 (variance ~ 1); an offset starting at
        # log(init variance) is what actually gives the intended small initial variance.
        if settings.logvar_init_variance is not None:
            self.logvar_bias = nn.Parameter(torch.full((dim,), math.log(settings.logvar_init_variance)))
        else:
            self.logvar_bias = None

    @classmethod
    def check_settings(cls, settings: HeadSettings) -> None:
        """Types, ranges and enums of head.bayes are the schema's; what it cannot say is checked here."""
        b = settings.bayes
        require(b is not None, "head.bayes", "the Bayesian head needs its settings")
        assert b is not None
        lo, hi = b.logvar_clamp
        require(lo < hi, "head.bayes.logvar_clamp", f"expected [low, high] with low < high, got {[lo, hi]}")

    @classmethod
    def from_settings(cls, settings: HeadSettings, input_size: int, prompt_size: int) -> BayesianGPMHead:
        return cls(input_size, prompt_size, settings.dim, settings.normalize, settings.gate, settings.bayes)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> Encoding:
        raw_mean, logvar = self.value_head(h).split(self.dim, dim=-1)
        if self.logvar_bias is not None:
            logvar = logvar + self.logvar_bias
        logvar = logvar.clamp(*self.clamp)
        mean = F.normalize(raw_mean, p=2, dim=-1) if self.normalize else raw_mean
        var = logvar.exp()
        out = {"mean": mean, "var": var, "logvar": logvar, "raw_mean": raw_mean, "gate": self._gate(h_prompt)}
        if self.training:
            out["sample"] = sample_embedding(mean, var, self.normalize)
        return out

    @classmethod
    def score(cls, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Score of the posterior means and its closed-form variance."""
        gate = pair_gate(enc_a["gate"], enc_b["gate"])
        score = gpm_score(enc_a["mean"], enc_b["mean"], gate)
        return score, gpm_score_variance(enc_a["mean"], enc_a["var"], enc_b["mean"], enc_b["var"], gate)

    def preference_prob(self, enc_a: Encoding, enc_b: Encoding) -> torch.Tensor:
        """P(a > b) = E[sigmoid(s / tau)] for s ~ N(score, closed-form variance) per row (float64), integrated as
        the evaluation and the exported loader integrate it."""
        score, variance = self.compare(enc_a, enc_b)
        assert variance is not None  # a Bayesian head's score always carries its variance
        prob = gaussian_preference_prob(
            score.detach().double().cpu().numpy(), variance.detach().double().cpu().numpy(), self.tau
        )
        return torch.from_numpy(prob).to(score.device)

    @classmethod
    def training_score(cls, out_c: Encoding, out_r: Encoding) -> torch.Tensor:
        """Score of posterior samples in train mode, of the posterior means otherwise."""
        gate = pair_gate(out_c.get("gate"), out_r.get("gate"))
        key = "sample" if "sample" in out_c else "mean"
        return gpm_score(out_c[key], out_r[key], gate)

    def projection_rows(self) -> torch.Tensor:
        """The mean half of the value head (what the score reads)."""
        return self.value_head.weight[: self.dim]

    def ranking_loss(self, out_c: Encoding, out_r: Encoding, step: int) -> LossParts:
        """Preference NLL on posterior samples + beta(step) * (KL_c + KL_r) to the N(0, prior_variance) prior."""
        parts = super().ranking_loss(out_c, out_r, step)
        bayes: BayesSettings = self.settings.bayes  # type: ignore[assignment]
        beta = kl_beta(step, bayes.kl_warmup_steps, bayes.max_kl_weight)
        kl = (
            gaussian_kl(kl_mean_term(out_c, bayes.kl_mean), out_c["var"], bayes.prior_variance)
            + gaussian_kl(kl_mean_term(out_r, bayes.kl_mean), out_r["var"], bayes.prior_variance)
        ).mean()
        pref = parts.preference_loss
        return LossParts(pref + beta * kl, pref, kl, beta, parts.score, parts.prob)
