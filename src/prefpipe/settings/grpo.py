"""Settings of the train_grpo and eval_policy rules (`grpo`): one GRPO run, `grpo.defaults` deep-merged with
`grpo.runs.<run>`; the same settings drive policy evaluation (its own knobs under `eval`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from prefpipe.settings.run import RunSettings


def no_kl_term(beta: float | None) -> bool:
    """beta = 0 turns the KL penalty off: the loss needs no reference log-probs and no KL metric is logged (the
    one place that says so; None, a beta not recorded, is not 0)."""
    return beta == 0


@dataclass
class GrpoLoraSettings:
    enabled: bool
    r: int
    alpha: int
    dropout: float
    target_modules: str | list[str] | None


@dataclass
class RolloutSettings:
    """Who samples the completions: `plain` (prefpipe's decode) or a colocated `vllm` engine, and how the
    trainer corrects for the engine's log-prob mismatch (prefpipe.grpo.rollout.engines)."""

    engine: str  # plain | vllm
    gpu_memory_utilization: float  # vllm on CUDA only
    cpu_kv_cache_gib: float  # vllm on CPU only
    importance_correction: str  # a registered correction (grpo/rollout/engines/correction.py)
    importance_cap: float
    sync_tolerance: float
    # plain engine: torch.compile mode of the decode step (grpo/rollout/fast/static_decode.py COMPILE_MODES)
    compile_decode: str


@dataclass
class EpisodeSettings:
    """Multi-turn rollouts (prefpipe.grpo.rollout.episodes): the policy calls the environment's tools and reads
    their results until it answers or hits a limit; off = single-turn completions."""

    enabled: bool
    environment: str  # a registered environment (prefpipe.grpo.environments.registry)
    options: dict[str, dict[str, Any]]  # each environment's options; the chosen one's go to its factory
    tool_format: str  # tags | chat_template | chat_template_or_tags (grpo/rollout/episodes/tool_formats.py)
    max_turns: int
    max_turn_tokens: int
    max_episode_tokens: int  # context after the prompt, policy and environment tokens together (H04)
    max_result_chars: int  # a longer tool result is cut (counted as result_cut)

    def environment_spec(self) -> dict[str, Any]:
        """The registry's spec of the chosen environment: its type and its options."""
        return {"type": self.environment, **self.options.get(self.environment, {})}


@dataclass
class PolicyEvalSettings:
    primary: str  # headline decoding: sampled | greedy (both are always reported)
    max_new_tokens: int
    temperature: float  # sampled decoding; the KL estimate always samples at temperature 1
    top_p: float
    max_prompt_length: int | None
    batch_size: int
    max_prompts: int | None  # null = every held-out prompt
    reward_batch_size: int
    kl_estimate: bool
    split: str  # heldout | validation (prefpipe.grpo.splits)
    curve_every: int  # 0 = no learning curve
    curve_prompts: int | None
    bootstrap_samples: int
    confidence: float


@dataclass
class GrpoSettings(RunSettings):
    stage_schema: ClassVar[str] = "grpo.schema.yaml#/$defs/grpo_run"
    derived_keys: ClassVar[tuple[str, ...]] = ("run",)

    run: str
    steps: int
    validation_prompts: int
    prompts_per_step: int
    num_generations: int
    max_prompt_length: int | None
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    learning_rate: float
    weight_decay: float
    adam_betas: tuple[float, float]
    warmup_steps: int
    max_grad_norm: float
    num_iterations: int
    epsilon_low: float
    epsilon_high: float
    beta: float
    kl_estimator: str
    log_ratio_clamp: float | None
    prompts: str  # main (data.prompts) | multihop (the synthetic multi-hop world's questions)
    policy_objective: str  # ppo_clip | gspo | cispo (grpo/algorithm/objectives.py)
    loss_type: str
    scale_rewards: str
    advantage_eps: float
    mask_truncated_completions: bool
    mask_mode: (
        str  # completion | with_prompt | with_environment (debugging switch: a deliberately wrong mask)
    )
    mask_mode_from_step: int  # the first step trained with mask_mode (earlier: completion)
    reference_mode: str  # auto | disable_adapter | frozen_copy
    micro_batch_size: int
    gradient_checkpointing: bool  # the policy's training forward only (generation keeps its KV cache)
    logprob_chunk_tokens: int  # 0 = plain; N: the output layer over N positions at a time (grpo/logprobs.py)
    lora: GrpoLoraSettings
    rollout: RolloutSettings
    episodes: EpisodeSettings
    rewards: list[dict[str, Any]]  # complete specs: the schema fills each source's defaults
    reward_model: str | None
    sample_every: int
    samples_per_log: int
    checkpoint_every: int
    inspect_steps: list[int]
    keep_checkpoint: bool
    save_merged: bool
    device: str
    dtype: str
    eval: PolicyEvalSettings

    @property
    def kl_to_reference(self) -> bool:
        """The loss has a KL term to the reference policy (beta != 0), so it needs the reference's log-probs."""
        return not no_kl_term(self.beta)

    def mask_mode_at(self, step: int) -> str:
        """The loss mask of a step: mask_mode from mask_mode_from_step on, the correct `completion` before."""
        return self.mask_mode if step >= self.mask_mode_from_step else "completion"

    @property
    def sampled_tokens(self) -> int:
        """Most tokens one rollout row samples: a completion's max_new_tokens, or an episode's whole budget."""
        return self.episodes.max_episode_tokens if self.episodes.enabled else self.max_new_tokens

    def uses_reward_model(self) -> bool:
        return any(spec["type"] == "reward_model" for spec in self.rewards)
