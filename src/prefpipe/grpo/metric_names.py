"""Names of what the GRPO stages write: metrics.jsonl columns of train_grpo and the summary keys of train_grpo
and eval_policy. They live here, with no torch import, so the CPU-only report (and the health checks) can
read them without loading the trainers.
"""

from __future__ import annotations

# --- train_grpo metrics.jsonl. `{name}`: a reward function or a KL estimator.
REWARD_MEAN, REWARD_STD = "reward_mean", "reward_std"
REWARD_PART_MEAN, REWARD_PART_STD = "reward/{name}_mean", "reward/{name}_std"
# Share of prompt groups whose values of one reward part are not all equal: with a continuous reward-model part
# in the sum, frac_reward_zero_std is always 0, and this says whether the verifier itself carries a signal.
REWARD_PART_FRAC_MIXED = "reward/{name}_frac_mixed"
ADV_ABS_MEAN, ADV_ABS_MAX = "adv_abs_mean", "adv_abs_max"
KL_MEAN, KL_MAX, MAX_ABS_LOG_RATIO = "kl_{name}_mean", "kl_{name}_max", "max_abs_log_ratio"
LENGTH_MEAN, LENGTH_MIN, LENGTH_MAX = (
    "completion_length_mean",
    "completion_length_min",
    "completion_length_max",
)
TRUNCATED_RATIO, PROMPT_TRUNCATION_RATE = "truncated_ratio", "prompt_truncation_rate"
# Share of loss-carrying tokens that are PROMPT tokens: 0 with a correct mask (grpo.mask_mode: completion).
PROMPT_LOSS_SHARE = "prompt_loss_share"
# Multi-turn episodes (grpo/rollout/episodes/): share of loss-carrying tokens that are ENVIRONMENT tokens (0 with a
# correct mask; grpo.mask_mode: with_environment is the deliberate wrong one, H02), and per step the episodes'
# policy turns, tool calls, environment failures by kind (`{kind}`: grpo/environments/base.py ERROR_KINDS), share
# of environment tokens in the episodes, tokens after the prompt, result tokens cut for the budget (H04), answers.
ENV_LOSS_SHARE = "env_loss_share"
# The same share checked against the episodes' own segments (grpo/training/episode_steps.py audit): loss tokens
# that no policy segment holds, over every loss token; the environment-loss diagnostic reads it where logged.
EPISODE_ENV_TRAINED_SHARE = "episode/env_trained_share"
EPISODE_TURNS, EPISODE_CALLS, EPISODE_ENV_ERRORS = (
    "episode/turns_mean",
    "episode/calls_mean",
    "episode/env_{kind}",
)
EPISODE_ENV_TOKEN_SHARE, EPISODE_LENGTH_MEAN, EPISODE_LENGTH_MAX = (
    "episode/env_token_share",
    "episode/length_mean",
    "episode/length_max",
)
EPISODE_CONTEXT_CUT, EPISODE_ANSWERED = "episode/context_cut_rate", "episode/answered_rate"
# grpo/rollout/episodes/measures.py: supporting titles retrieved, answer in a result, and per turn {turn} (0-based)
# the context length the next turn reads and the share of episodes the token budget ended there (H04).
EPISODE_SUPPORT_RECALL, EPISODE_ANSWER_FOUND = "episode/support_recall", "episode/answer_in_results"
EPISODE_CONTEXT_TURN, EPISODE_TRUNCATED_TURN = "episode/context_turn{turn}", "episode/truncated_turn{turn}"
# The verifier on every training batch whose prompts have answers, optimised or not (Gao et al.'s "gold" signal
# beside the reward model's "proxy" score): share of completions it accepts, mean and std of its score.
VERIFIER_ACCURACY, VERIFIER_SCORE_MEAN, VERIFIER_SCORE_STD = (
    "verifier_accuracy",
    "verifier_score_mean",
    "verifier_score_std",
)
# A risk-averse reward-model reward (risk_aversion lambda > 0; grpo/analyses/risk.py), `{name}` the reward: the mean
# penalty lambda * sd(s), the mean over prompt groups of the within-group sd of the penalty and of the
# posterior-mean score, and the ratio of those two (0: the penalty is a constant shift that advantages cancel).
RISK_PENALTY_MEAN, RISK_PENALTY_GROUP_SD, RISK_SCORE_GROUP_SD, RISK_SPREAD_RATIO = (
    "risk/{name}_penalty_mean",
    "risk/{name}_penalty_group_sd",
    "risk/{name}_score_group_sd",
    "risk/{name}_spread_ratio",
)
FRAC_REWARD_ZERO_STD, ENTROPY, GRAD_NORM, CLIP_RATIO_REGION = (
    "frac_reward_zero_std",
    "entropy",
    "grad_norm",
    "clip_ratio_region",
)
STEP_TIME = "step_time"
ENGINE_SYNC_TIME = (
    "engine_sync_time"  # a separate rollout engine's weight sync and probe (grpo/rollout/engines/)
)
# The loss of the first optimizer pass over the batch (equal to `loss` with num_iterations 1): what the one-step
# inspector's table sums to.
LOSS_FIRST_ITERATION = "loss_first_iteration"
# Per-phase seconds and shares of a step (common/torch_runtime/phases.PhaseClock): PHASE_PREFIX + <phase>_s and
# <phase>_share for each of PHASES and `other` (what no phase claimed: inspection saves, bookkeeping).
PHASE_PREFIX = "phase/"
PHASES = ("rollout", "reward", "logprobs", "update", "sync", "other")
PHASE_KEYS = tuple(f"{PHASE_PREFIX}{p}_{unit}" for p in PHASES for unit in ("s", "share"))
TIMING_KEYS = (STEP_TIME, "tokens_per_second", ENGINE_SYNC_TIME, *PHASE_KEYS)

# --- train_grpo summary.json
REWARD_HACKING = "reward_hacking"  # the over-optimisation block (grpo/analyses/hacking.py)
RISK_PENALTY = "risk_penalty"  # the risk-averse rewards' penalty spread over the run (grpo/analyses/risk.py)

# --- eval_policy summary.json: the decodings, the reward-model block (its win rate of trained over base) and
# the KL block; then the keys of each policy's block.
DECODINGS = ("greedy", "sampled")
DECODING, DECODINGS_KEY, REWARD_MODEL, WIN_RATE, KL_TO_BASE = (
    "decoding",
    "decodings",
    "reward_model",
    "win_rate",
    "kl_to_base",
)
ACCURACY, ACCURACY_CI95, N = "accuracy", "accuracy_ci95", "n"
# trained - base paired over prompts, per decoding (common.stats.paired_difference)
PAIRED = "paired"
KL_K3_TOKEN_MEAN = "k3_token_mean"
