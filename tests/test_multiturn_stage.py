"""A multi-turn GRPO run through the real train_grpo stage: a tiny Llama taught the tag format searches, reads and
answers; two steps roll out episodes on the plain engine, reward their final answers, train with the
environment's tokens masked, and log the episode metrics per step. The vLLM engine (and a reward model) with
episodes is refused naming the keys."""

from __future__ import annotations

import json

import pytest
from support.episodes import taught_inputs
from support.models import chat_tokenizer, tiny_llama
from support.settings import grpo_settings, stage_json
from support.stages import run_main

from prefpipe import eval_policy, train_grpo
from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl
from prefpipe.data.answers import normalize_answer
from prefpipe.grpo.metric_names import (
    ENV_LOSS_SHARE,
    EPISODE_ANSWER_FOUND,
    EPISODE_ANSWERED,
    EPISODE_CALLS,
    EPISODE_CONTEXT_TURN,
    EPISODE_ENV_ERRORS,
    EPISODE_ENV_TOKEN_SHARE,
    EPISODE_SUPPORT_RECALL,
    EPISODE_TRUNCATED_TURN,
    EPISODE_TURNS,
)

EPISODES = {
    "enabled": True,
    "options": {"search": {"top_k": 1}},
    "max_turns": 3,
    "max_turn_tokens": 40,
    "max_episode_tokens": 150,
}
RUN = {
    "steps": 2,
    "prompts_per_step": 2,
    "num_generations": 2,
    "learning_rate": 1e-3,
    "beta": 0.04,
    "temperature": 0.7,
    "sample_every": 1,
    "checkpoint_every": 0,
    "episodes": EPISODES,
    "rewards": [{"type": "exact_match", "weight": 1.0}],
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return taught_inputs(tmp_path_factory.mktemp("multiturn"))


def test_two_multiturn_steps_through_the_stage_log_the_episode_metrics(folders):
    out = folders / "grpo" / "multi"
    settings = grpo_settings(RUN, run="multi", seed=0)
    code, _ = run_main(
        train_grpo.main, stage_json(settings), data=folders / "data", policy=folders / "policy", out=out
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["all_finite"]
    metrics = read_jsonl(out / "metrics.jsonl")
    for m in metrics:
        assert 1 <= m[EPISODE_TURNS] <= 3 and 0 <= m[EPISODE_CALLS] <= 2
        assert 0 < m[EPISODE_ENV_TOKEN_SHARE] < 1  # taught to search: every episode holds a result
        assert m[ENV_LOSS_SHARE] == 0.0  # the correct mask: no loss token is the environment's
        assert 0 <= m[EPISODE_ENV_ERRORS.format(kind="malformed_call")] <= m[EPISODE_CALLS]
        assert 0 <= m[EPISODE_ANSWERED] <= 1 and 0 <= m[EPISODE_ANSWER_FOUND] <= 1
        assert 0 <= m[EPISODE_SUPPORT_RECALL] <= 1
        # the first result lands after the prompt and the first turn; later turns only add tokens
        contexts = [m.get(EPISODE_CONTEXT_TURN.format(turn=k)) for k in range(3)]
        assert contexts[0] > 10
        assert all(b is None or b >= a for a, b in zip(contexts, contexts[1:], strict=False) if a is not None)
        assert 0 <= m[EPISODE_TRUNCATED_TURN.format(turn=0)] <= 1
        assert m["reward/exact_match_mean"] == pytest.approx(m["reward_mean"])
    # the taught policy searches the demonstration's query: the supporting paragraph comes back at step 0
    assert metrics[0][EPISODE_SUPPORT_RECALL] > 0.5 and metrics[0][EPISODE_ANSWER_FOUND] > 0.5
    print({k: round(v, 3) for k, v in metrics[-1].items() if k.startswith(("episode/", "reward", "env_"))})
    samples = read_jsonl(out / "samples.jsonl")
    assert any("<result>" in s["completion"] for s in samples)


def test_eval_policy_scores_whole_episodes_base_against_trained(folders):
    """eval_policy on a multi-turn run: an untaught base against the taught policy on the same questions, graded
    on each episode's final answer; F1, calls and support recall per side match the per-example rows, and the
    paired F1 interval is the bootstrap of the per-question differences."""
    tok = chat_tokenizer()
    tiny_llama(tok, hidden=64).save_pretrained(folders / "base")
    tok.save_pretrained(folders / "base")
    settings = grpo_settings(
        {**RUN, "eval": {"batch_size": 1, "bootstrap_samples": 200}}, run="multi", seed=0
    )
    out = folders / "policy_eval" / "multi"
    code, _ = run_main(
        eval_policy.main, stage_json(settings), data=folders / "data", base=folders / "base",
        policy=folders / "policy", out=out,
    )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = read_jsonl(out / "per_example.jsonl")
    greedy = summary["decodings"]["greedy"]
    # the taught policy reproduces its demonstrations: one search, the supporting paragraph, the right answer
    assert greedy["trained"]["accuracy"] == 1.0
    assert greedy["episodes"]["trained"] == {
        "f1": 1.0, "calls_per_episode": 1.0, "support_recall": 1.0, "answered": 1.0
    }  # fmt: skip
    primary = summary["episodes"]  # the primary decoding's block, recomputed from the per-example rows
    for side in ("base", "trained"):
        want_em = [normalize_answer(r[f"{side}_answer"] or "") == normalize_answer(r["answer"]) for r in rows]
        assert [r[f"{side}_correct"] for r in rows] == want_em
        assert primary[side]["f1"] == pytest.approx(sum(r[f"{side}_f1"] for r in rows) / len(rows))
        assert primary[side]["calls_per_episode"] == sum(r[f"{side}_calls"] for r in rows) / len(rows)
    diffs = [r["trained_f1"] - r["base_f1"] for r in rows]
    assert primary["f1_paired"]["delta"] == pytest.approx(sum(diffs) / len(diffs))
    lo, hi = primary["f1_paired"]["ci"]
    assert min(diffs) - 1e-9 <= lo <= hi <= max(diffs) + 1e-9
    assert all("<search>" in r["trained"] for r in rows)  # the whole episode is kept per question


def test_episodes_refuse_reward_models():
    # the vLLM engine is not refused: it rolls out episodes too (tests/test_grpo_vllm_episodes.py, in its
    # virtualenv; here the main virtualenv refuses it for want of the package, tests/faults/test_dependencies.py)
    change = {"reward_model": "gpm", "rewards": [{"type": "reward_model", "weight": 1.0}]}
    with pytest.raises(ConfigError) as err:
        grpo_settings({**RUN, **change}, run="multi")
    assert all(w in str(err.value) for w in ("episodes.enabled", "reward_model"))


def test_an_engine_without_an_episode_decoder_is_refused_naming_the_key():
    from prefpipe.grpo.rollout.engines.base import PlainEngine
    from prefpipe.grpo.rollout.episodes.generate import PlainDecoder
    from prefpipe.grpo.training.episode_steps import EpisodeSteps

    settings = grpo_settings(RUN, run="multi")
    steps = EpisodeSteps(settings, chat_tokenizer())
    policy = tiny_llama(chat_tokenizer())
    assert isinstance(steps.decoder_of(PlainEngine(settings), policy, 0, 0), PlainDecoder)
    with pytest.raises(ValueError, match=r"grpo\.multi\.rollout\.engine 'plain' rolls out no episodes"):
        steps.decoder_of(object(), policy, 0, 0)  # a registered engine without episode_decoder


def test_an_unknown_environment_is_refused_naming_it():
    with pytest.raises(ConfigError, match="unknown environment 'nope'"):
        from prefpipe.grpo.training.episode_steps import EpisodeSteps

        EpisodeSteps(
            grpo_settings({**RUN, "episodes": {**EPISODES, "environment": "nope"}}, run="multi"), None
        )
