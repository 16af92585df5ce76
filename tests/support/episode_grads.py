"""The gradient of the trainer's GRPO loss with respect to the logits that predict each completion token of a
built batch of episodes: what the mask tests walk token by token (tests/test_episode_mask.py,
tests/test_chat_tool_format.py, tests/test_grpo_vllm_episodes.py)."""

from __future__ import annotations

import torch

from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.algorithm.losses import BatchNorms, aggregate_loss, grpo_loss
from prefpipe.grpo.algorithm.spans import loss_spans, plain_span
from prefpipe.grpo.algorithm.update import micro_batch_loss
from prefpipe.grpo.rollout.episodes.episode import ENVIRONMENT, POLICY

G = 2


def logit_grads(
    model, reference, rollout, mask_mode: str, micro: int, settings=None
) -> dict[tuple[int, int], torch.Tensor]:
    """{(row, completion position j): d loss / d logits that predict completion token j} through the trainer's
    own spans and loss (dapo, beta 0.04, k3); with `settings` (GrpoSettings), the trainer's micro-batch loss
    under them instead: its objective, KL and a sampling engine's importance weights (rollout.sampler_logprobs)."""
    kept: list[torch.Tensor] = []

    def keep(_module, _inputs, out):
        out.retain_grad()
        kept.append(out)

    hook = model.lm_head.register_forward_hook(keep)
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), G, "group", 1e-4).advantages
    spans = loss_spans(rollout, mask_mode, False, micro)
    norms = BatchNorms(
        4, sum(int(sp.mask.sum()) for sp in spans), len(spans), rollout.completion_ids.shape[1]
    )
    grads = {}
    try:
        for sp in spans:
            mb = plain_span(rollout, sp)
            logp, _ = mb.logprobs(model, 1.0)
            with torch.no_grad():
                ref, _ = mb.logprobs(reference, 1.0)
            if settings is None:
                out = grpo_loss(logp, logp.detach(), adv[mb.rows], mb.mask, norms, loss_type="dapo", eps_low=0.2,
                                eps_high=0.28, beta=0.04, ref_logp=ref, kl_estimator="k3", log_ratio_clamp=None,
                                objective="ppo_clip")  # fmt: skip
            else:
                terms = micro_batch_loss(settings, rollout, mb, (logp, logp.detach(), ref), adv[mb.rows])
                out = aggregate_loss(terms, mb.mask, settings.loss_type, norms)
            out.loss.backward()
            logits = kept.pop()
            assert logits.shape[1] == sp.n_scored + 1  # logits_to_keep: the last one predicts nothing
            assert torch.count_nonzero(logits.grad[:, -1]) == 0
            for i, row in enumerate(range(sp.rows.start, sp.rows.stop)):
                for j in range(sp.n_completion):
                    grads[(row, j)] = logits.grad[i, j]
    finally:
        hook.remove()
    return grads


def walk_positions(grads, rollout, episodes, trained: set[str]) -> dict[str, int]:
    """Brute force: every completion position of every episode, by its owner; a token of an owner in `trained`
    has a non-zero logit gradient, any other exactly zero (padding after an episode: not scored, or zero).
    Returns how many positions each owner held."""
    seen = {POLICY: 0, ENVIRONMENT: 0}
    for row, ep in enumerate(episodes):
        owners = ep.owners
        for j in range(rollout.completion_ids.shape[1]):
            g = grads.get((row, j))
            if j >= len(owners):
                assert g is None or torch.count_nonzero(g) == 0
                continue
            seen[owners[j]] += 1
            assert g is not None, f"row {row} token {j} ({owners[j]}) was not scored"
            if owners[j] in trained:
                assert torch.count_nonzero(g) > 0, f"row {row} token {j} ({owners[j]}) got no gradient"
            else:
                assert torch.count_nonzero(g) == 0, f"row {row} token {j} ({owners[j]}) got a gradient"
    return seen
