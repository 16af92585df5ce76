"""The GRPO update's memory levers leave its gradients alone (issue 34, the 2B step's peak):

- micro-batches: `update` runs backward per micro-batch, each micro-batch's loss normalised by batch-wide
  counts, so the accumulated gradient equals the gradient of the whole batch's objective written out here
  independently (one padded forward over every row, each loss type's formula from docs/ANCHORS: grpo, dr_grpo,
  dapo over the whole batch, bnpo per micro-batch then averaged);
- grpo.gradient_checkpointing: the same gradients as without it (full fine-tuning and a fresh LoRA adapter),
  and after the update the policy is back to caching keys and values for generation;
- the log-probs with entropy (fp32 log_softmax straight from bf16 logits, entropy in row chunks) equal the
  fp64 textbook values and the entropy-free path's log-probs and gradients.
"""

from __future__ import annotations

import pytest
import torch
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings

from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.transformers_api import get_peft_model, output_cache, unwrap_peft
from prefpipe.grpo import logprobs as logprobs_module
from prefpipe.grpo.algorithm.reference import build_reference
from prefpipe.grpo.algorithm.update import Learner, StepBatch, checkpointed, make_adamw, update
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.kl import per_token_kl
from prefpipe.grpo.logprobs import completion_logprobs, token_logprobs
from prefpipe.grpo.rollout.completions import Rollout

N, P, C, BETA = 8, 5, 6, 0.04
LENGTHS = [6, 2, 4, 1, 6, 3, 5, 2]  # trained tokens per row: ragged, so the normalisers differ


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


def _rollout(vocab: int) -> Rollout:
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(5, vocab, (N // 4, P), generator=g).repeat_interleave(4, 0)
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[4:, :2] = 0  # the second group's prompt is left padded
    comp_mask = (torch.arange(C)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    return Rollout(
        prompt_ids=prompts,
        prompt_mask=prompt_mask,
        completion_ids=torch.randint(5, vocab, (N, C), generator=g),
        completion_mask=comp_mask,
        env_mask=torch.ones_like(comp_mask),
        truncated=torch.tensor(LENGTHS) == C,
        prompt_truncated=torch.zeros(N, dtype=torch.bool),
        texts=[""] * N,
    )


def _policy(tok, lora: bool) -> torch.nn.Module:
    model = tiny_llama(tok, seed=3)
    if not lora:
        return model
    from peft import LoraConfig

    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    policy = get_peft_model(model, config)
    for name, p in policy.named_parameters():  # a trained-looking adapter: B != 0, so the gradients differ
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(len(name)))
    return policy


def _update_grads(
    tok, loss_type: str, micro: int, lora: bool = False, fast_paths: bool = True, **over
) -> tuple[list[torch.Tensor], int]:
    """The gradients one `update` leaves on the trainable parameters (clipping off), and how often the first
    layer's first norm ran forward inside a backward pass (checkpointing's recomputation; never without it)."""
    settings = grpo_settings(
        {
            "num_generations": 4,
            "max_new_tokens": C,
            "beta": BETA,
            "loss_type": loss_type,
            "micro_batch_size": micro,
            "mask_truncated_completions": False,
            "max_grad_norm": 1e9,
            "lora": {"enabled": lora},
            **over,
        },
        fast_paths=fast_paths,
    )
    policy = _policy(tok, lora)
    params = [p for p in policy.parameters() if p.requires_grad]
    reference = build_reference(policy, "fresh" if lora else "none", True, settings.reference_mode)
    learner = Learner(
        settings, policy, make_adamw(params, settings), params, reference, DataParallel(), torch.device("cpu")
    )
    rollout = _rollout(policy.config.vocab_size)
    adv = torch.linspace(-1.0, 1.2, N)
    calls = []
    hook = (
        unwrap_peft(policy)
        .model.layers[0]
        .input_layernorm.register_forward_hook(
            lambda *_: calls.append(torch._C._current_graph_task_id() >= 0)
        )
    )
    update(learner, StepBatch([{}] * N, rollout, adv.clone(), {}, adv))
    hook.remove()
    return [p.grad.clone() for p in params], sum(calls)


def _objective(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, micro: int) -> torch.Tensor:
    """The batch's loss written out from the definitions (ANCHORS.md, GRPO)."""
    if loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1)).mean()
    if loss_type == "dapo":
        return (per_token * mask).sum() / mask.sum()
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (N * C)
    parts = [(per_token[s] * mask[s]).sum() / mask[s].sum() for s in torch.arange(N).split(micro)]
    return torch.stack(parts).mean()  # bnpo: per micro-batch, averaged


def _single_pass_grads(tok, loss_type: str, micro: int) -> list[torch.Tensor]:
    """One padded forward over all rows, surrogate at ratio 1 (-A_i per token, gradient -A_i d log pi) plus
    beta * k3 to a frozen copy, the objective above, one backward."""
    policy = _policy(tok, lora=False)
    reference = tiny_llama(tok, seed=3).eval()
    rollout = _rollout(policy.config.vocab_size)
    temperature = grpo_settings().temperature
    adv = torch.linspace(-1.0, 1.2, N)
    logp, _ = completion_logprobs(policy.train(), rollout.input_ids, rollout.attention_mask, C, temperature)
    with torch.no_grad():
        ref, _ = completion_logprobs(reference, rollout.input_ids, rollout.attention_mask, C, temperature)
    mask = rollout.completion_mask.float()
    per_token = -adv[:, None] * torch.exp(logp - logp.detach()) + BETA * per_token_kl(logp, ref, mask, "k3")
    _objective(per_token, mask, loss_type, micro).backward()
    return [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("micro", [3, 8])
def test_micro_batch_gradients_equal_the_single_pass_gradient(tok, loss_type, micro):
    got, _ = _update_grads(tok, loss_type, micro)
    want = _single_pass_grads(tok, loss_type, micro)
    assert any(float(w.abs().max()) > 1e-4 for w in want)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-6, rtol=1e-4), float((g - w).abs().max())


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("fast_paths", [True, False])
def test_gradient_checkpointing_leaves_the_gradients_unchanged(tok, lora, fast_paths):
    plain, plain_calls = _update_grads(tok, "dapo", 3, lora=lora, fast_paths=fast_paths)
    checkpointed, calls = _update_grads(
        tok, "dapo", 3, lora=lora, fast_paths=fast_paths, gradient_checkpointing=True
    )
    assert plain_calls == 0 and calls > 0, "the layers were not recomputed: checkpointing did not act"
    assert len(plain) == len(checkpointed) > 0
    for a, b in zip(plain, checkpointed, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), float((a - b).abs().max())


def test_gradient_checkpointing_is_off_again_after_the_update(tok):
    """The rollout after an update samples with its KV cache: checkpointing covers the training passes only."""
    settings = grpo_settings(
        {"num_generations": 4, "max_new_tokens": C, "beta": 0.0, "gradient_checkpointing": True}
    )
    policy = _policy(tok, lora=True)
    params = [p for p in policy.parameters() if p.requires_grad]
    learner = Learner(
        settings, policy, make_adamw(params, settings), params, None, DataParallel(), torch.device("cpu")
    )
    adv = torch.linspace(-1.0, 1.0, N)
    update(learner, StepBatch([{}] * N, _rollout(policy.config.vocab_size), adv.clone(), {}, adv))
    assert not policy.get_base_model().is_activation_checkpointing
    out = policy.train()(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True)
    assert output_cache(out) is not None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_entropy_and_log_probs_equal_the_fp64_definitions(monkeypatch, temperature, dtype):
    # 7 x 5 rows of a 50-token vocabulary, chunks of 3 rows: the last chunk is partial
    monkeypatch.setattr(logprobs_module, "ENTROPY_CHUNK_ELEMENTS", 3 * 50 + 7)
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(7, 5, 50, generator=g)).to(dtype)
    targets = torch.randint(0, 50, (7, 5), generator=g)
    exact = torch.log_softmax(logits.double() / temperature, dim=-1)
    want_logp = exact.gather(-1, targets[..., None]).squeeze(-1)
    want_ent = -(exact.exp() * exact).sum(-1)
    a = logits.clone().requires_grad_(True)
    logp, ent = token_logprobs(a, targets, temperature, with_entropy=True)
    b = logits.clone().requires_grad_(True)
    plain, none = token_logprobs(b, targets, temperature, with_entropy=False)
    assert none is None and logp.dtype == ent.dtype == torch.float32 and not ent.requires_grad
    assert torch.allclose(logp.double(), want_logp, atol=1e-5)
    assert torch.allclose(ent.double(), want_ent, atol=1e-5)
    weights = torch.randn(7, 5, generator=g)
    (logp * weights).sum().backward()
    (plain * weights).sum().backward()
    assert torch.allclose(a.grad.float(), b.grad.float(), atol=1e-6)


def test_gradient_checkpointing_errors_name_the_setting():
    with pytest.raises(
        ConfigError, match=r"grpo\.runs\.verifier\.gradient_checkpointing: 'yes' is not of type"
    ):
        grpo_settings({"gradient_checkpointing": "yes"})
    refused = pytest.raises(ConfigError, match=r"grpo\.gradient_checkpointing: Linear does not support it")
    with refused, checkpointed(torch.nn.Linear(2, 2), True):
        pass
