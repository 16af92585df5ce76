"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi (Schulman's k1, k2, k3).

With log_ratio = ref_logp - logp (log of pi_ref / pi at the sampled token):
  k1 = -log_ratio                      unbiased, high variance, can be negative
  k2 = 0.5 * log_ratio**2              biased (exact only to second order), low variance, >= 0
  k3 = exp(log_ratio) - log_ratio - 1  unbiased, >= 0, but grows like exp(x) when pi puts a token far
                                       below pi_ref (12 nats gives about 1.6e5, the "KL 1e5" symptom)
All are computed in fp32 and the log-ratio is zeroed on masked positions BEFORE exp, so padding (where
log-probs are meaningless) can never overflow into NaN/inf. An optional clamp bounds the log-ratio as a guard.
"""

from __future__ import annotations

import torch

ESTIMATORS = ("k1", "k2", "k3")


def masked_log_ratio(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, clamp: float | None = None
) -> torch.Tensor:
    """log(pi_ref / pi) per token in fp32, exactly 0 where mask is 0, optionally clamped to [-clamp, clamp].
    The one masked log-ratio: the loss's importance ratio log(pi / pi_old) is this with (old_logp, logp)."""
    log_ratio = ref_logp.float() - logp.float()
    log_ratio = torch.where(mask.bool(), log_ratio, torch.zeros_like(log_ratio))
    if clamp is not None:
        log_ratio = log_ratio.clamp(-clamp, clamp)
    return log_ratio


def kl_from_log_ratio(log_ratio: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate from log(pi_ref / pi) (already masked); estimator is k1, k2 or k3."""
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.pow(2)
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {ESTIMATORS}")


def per_token_kl(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    estimator: str = "k3",
    clamp: float | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate, zero on masked positions."""
    return kl_from_log_ratio(masked_log_ratio(logp, ref_logp, mask, clamp), estimator) * mask.float()
