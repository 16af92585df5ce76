"""A vLLM engine colocated with the trainer (same process, same device): it samples the rollouts, and after every
optimizer step it receives the trainer's full weights (LoRA merged in, engines/weights.py) and proves it.

Why in-process: the engine's torch model is then reachable for `load_weights`, with no copy over a socket
(VLLM_ENABLE_V1_MULTIPROCESSING=0; a script that builds it needs an `if __name__ == "__main__":` guard).
Why `load_format="dummy"`: the engine starts with random weights and gets the policy's by the same sync as every
later step, so the first sync is checked like all others and no weight file is written.
Why the prefix cache is reset after a sync: cached prompt KV was computed with the previous weights.
The proof: a float64 checksum of the engine's parameters against the trainer's (in the engine's dtype); a
difference above `rollout.sync_tolerance` raises EngineOutOfSync naming the step, before any rollout from stale
weights. The per-token log-prob gap (engines/correction.py) is logged besides, catching what a checksum cannot
(an engine computing with something other than its parameters).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch

from prefpipe.generation.tokens import eos_token_ids, pad_token_id, tokenize_prompts
from prefpipe.grpo.engines.weights import checksum_difference, full_weights, weight_checksum
from prefpipe.grpo.policy_io import DTYPES
from prefpipe.grpo.rollout import Rollout, build_rollout
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger(__name__)
SYNC_TIME, SYNC_DIFF = "engine_sync_time", "engine_weight_checksum_diff"


class EngineOutOfSync(RuntimeError):
    """The engine's weights are not the trainer's after a sync: rollouts would come from another policy."""


def _engine_config_dir(policy: torch.nn.Module, work_dir: Path) -> Path:
    """config.json only: the engine builds the architecture from it and gets the weights by sync."""
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    folder = work_dir / "vllm_engine_config"
    folder.mkdir(parents=True, exist_ok=True)
    base.config.save_pretrained(str(folder))
    return folder


class VllmEngine:
    def __init__(self, settings: GrpoSettings, policy: torch.nn.Module, tokenizer, work_dir: Path) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: the model object stays reachable
        from vllm import LLM

        self.settings, self.r = settings, settings.rollout
        self.dtype = DTYPES[settings.dtype]
        on_cuda = next(policy.parameters()).device.type == "cuda"
        if not on_cuda:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(self.r.cpu_kv_cache_gib))))
        self.eos_ids = eos_token_ids(tokenizer, policy)
        self.pad_id = pad_token_id(tokenizer)
        self.llm = LLM(
            model=str(_engine_config_dir(policy, Path(work_dir))),
            load_format="dummy",
            skip_tokenizer_init=True,  # prompts go in as token ids; the trainer's tokenizer decodes
            generation_config="vllm",  # no sampling defaults from the model's generation_config.json
            dtype=settings.dtype,
            max_model_len=(settings.max_prompt_length or 512) + settings.max_new_tokens,
            gpu_memory_utilization=self.r.gpu_memory_utilization,
            enforce_eager=not on_cuda,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",  # after temperature/top-k/top-p, as the trainer scores
            seed=settings.seed,
        )
        self.sync(policy, -1)

    # ------------------------------------------------------------------------------------------ weights
    def _apply(self, fn):
        """fn(engine's torch model) on the (one, in-process) worker."""
        return self.llm.apply_model(fn)[0]

    def _push_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self._apply(lambda model: model.load_weights(iter(weights)))
        self.llm.reset_prefix_cache()

    def _engine_checksum(self) -> torch.Tensor:
        return self._apply(lambda model: weight_checksum(p for _, p in model.named_parameters()))

    def sync(self, policy: torch.nn.Module, step: int) -> dict[str, float]:
        """Load the policy's full weights into the engine, then compare checksums (raises EngineOutOfSync)."""
        t0 = time.perf_counter()
        weights = list(full_weights(policy))
        self._push_weights(weights)
        diff = checksum_difference(
            self._engine_checksum(), weight_checksum((t for _, t in weights), self.dtype)
        )
        when = "before step 0" if step < 0 else f"after step {step}"
        if not diff <= self.r.sync_tolerance:
            raise EngineOutOfSync(
                f"step {step}: the vLLM engine's weights differ from the trainer's {when} (relative checksum "
                f"difference {diff:.3g} > grpo.rollout.sync_tolerance {self.r.sync_tolerance:g}); the weight "
                "sync did not reach the engine"
            )
        return {SYNC_TIME: time.perf_counter() - t0, SYNC_DIFF: diff}

    # ------------------------------------------------------------------------------------------ sampling
    def _sampling_params(self, seed: int):
        from vllm import SamplingParams

        s = self.settings
        return SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            max_tokens=s.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob
            stop_token_ids=self.eos_ids,
            detokenize=False,
            seed=seed,
        )

    def generate(
        self, policy: torch.nn.Module, tokenizer, prompts: list[str], uniforms: torch.Tensor, seed: int
    ) -> Rollout:
        """G completions per prompt, one request each (its own seed: resumable, and G distinct samples)."""
        s, G = self.settings, self.settings.num_generations
        batch = tokenize_prompts(tokenizer, prompts, s.max_prompt_length)
        requests, params = [], []
        for p in range(batch.input_ids.shape[0]):
            ids = batch.input_ids[p][batch.attention_mask[p].bool()].tolist()
            for g in range(G):
                requests.append({"prompt_token_ids": ids})
                params.append(self._sampling_params(seed * 1_000_003 + p * G + g))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        device = next(policy.parameters()).device
        n, width = len(outputs), s.max_new_tokens
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        logps = torch.zeros(n, width)
        for row, out in enumerate(outputs):
            sample = out.outputs[0]
            tokens = list(sample.token_ids)
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            logps[row, : len(tokens)] = torch.tensor(
                [sample.logprobs[j][t].logprob for j, t in enumerate(tokens)], dtype=torch.float
            )
        rollout = build_rollout(tokenizer, batch, G, ids.to(device), self.eos_ids, device)
        rollout.sampler_logprobs = logps.to(device)
        return rollout

    def close(self) -> None:
        """Free the engine (its KV cache and weights)."""
        self.llm = None
