"""Only the policy's tokens train (issue #48 item 2, its first acceptance item): over built episodes, the
gradient of the GRPO loss (clipped surrogate + k3 KL to a reference) with respect to the logits that predict
each environment token is exactly zero and the one for each policy token is not, checked position by position
against a walk of the episodes' own token lists. The deliberate wrong mask (mask_mode: with_environment, H02)
trains the environment tokens and the env_loss_share metric and its health check fire."""

from __future__ import annotations

import pytest
import torch
from support.episode_grads import logit_grads, walk_positions
from support.episodes import built_episodes
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings, report_settings

from prefpipe.grpo.algorithm.advantages import group_advantages
from prefpipe.grpo.algorithm.reference import build_reference
from prefpipe.grpo.algorithm.spans import environment_loss_tokens, loss_spans
from prefpipe.grpo.algorithm.update import Learner, StepBatch, make_adamw, update
from prefpipe.grpo.analyses.health import check_run
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.metric_names import ENV_LOSS_SHARE, PROMPT_LOSS_SHARE
from prefpipe.grpo.rollout.episodes.episode import ENVIRONMENT, POLICY

G = 2


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


def built(tok):
    return built_episodes(tok, G)


@pytest.mark.parametrize("micro", [1, 4])
@pytest.mark.parametrize("mask_mode", ["completion", "with_environment"])
def test_environment_tokens_get_exactly_zero_gradient_and_policy_tokens_do_not(tok, mask_mode, micro):
    model, reference = tiny_llama(tok, seed=0), tiny_llama(tok, seed=1)
    rollout, episodes = built(tok)
    grads = logit_grads(model, reference, rollout, mask_mode, micro)
    trained = {POLICY} if mask_mode == "completion" else {POLICY, ENVIRONMENT}
    for ep in episodes:  # policy tokens after a result
        assert set(ep.owners) == {POLICY, ENVIRONMENT} and ep.owners[-1] == POLICY
    seen = walk_positions(grads, rollout, episodes, trained)  # brute force: every token, by its owner
    assert seen[POLICY] > 40 and seen[ENVIRONMENT] > 40
    spans = loss_spans(rollout, mask_mode, False, micro)
    env_tokens = sum(ep.owners.count(ENVIRONMENT) for ep in episodes)
    assert environment_loss_tokens(rollout, spans) == (0 if mask_mode == "completion" else env_tokens)


def _update(tok, mask_mode: str, fast_paths: bool) -> tuple[dict[str, float], list[torch.Tensor]]:
    settings = grpo_settings(
        {"num_generations": G, "beta": 0.04, "mask_mode": mask_mode, "micro_batch_size": 2,
         "mask_truncated_completions": False, "max_grad_norm": 1e9},
        fast_paths=fast_paths,
    )  # fmt: skip
    policy = tiny_llama(tok, seed=0)
    params = list(policy.parameters())
    reference = build_reference(policy, "none", True, settings.reference_mode)
    learner = Learner(
        settings, policy, make_adamw(params, settings), params, reference, DataParallel(), "cpu"
    )
    rollout, _ = built(tok)
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), G, "group", 1e-4).advantages
    metrics = update(learner, StepBatch([{}] * 4, rollout, adv.clone(), {}, adv))
    return metrics, [p.grad.clone() for p in params]


def test_the_trainers_update_reports_the_environment_share_and_h02_fires(tok):
    right, right_grads = _update(tok, "completion", fast_paths=True)
    plain, plain_grads = _update(tok, "completion", fast_paths=False)
    wrong, _ = _update(tok, "with_environment", fast_paths=True)
    _, episodes = built(tok)
    env = sum(e.owners.count(ENVIRONMENT) for e in episodes)
    total = sum(len(e.ids) for e in episodes)
    assert right[ENV_LOSS_SHARE] == 0.0 and right["num_loss_tokens"] == total - env
    assert wrong[ENV_LOSS_SHARE] == pytest.approx(env / total) and wrong["num_loss_tokens"] == total
    assert right[PROMPT_LOSS_SHARE] == wrong[PROMPT_LOSS_SHARE] == 0.0
    for a, b in zip(right_grads, plain_grads, strict=True):  # shared-prompt fast path: the same tokens train
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    import pandas as pd

    thresholds = report_settings().diagnostics
    for metrics, status in ((right, "ok"), (wrong, "flagged")):
        frame = pd.DataFrame([{"step": 0, **metrics}, {"step": 1, **metrics}])
        flag = check_run("r", frame, thresholds, only=("environment loss",))[0]
        assert flag.status == status and (status == "ok" or flag.first_step == 0)
