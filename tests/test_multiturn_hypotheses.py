"""H02 and H04 on a multi-turn task. H02: what trained is checked against each episode's segments (not against
the rollout's env_mask, which a wrong build would make agree with a wrong mask), by a walk compared with a
count from the segments themselves; through the real train_grpo stage, a wrong mask that starts at step 2
(mask_mode: with_environment, mask_mode_from_step: 2) makes the environment-loss diagnostic fire at step 2 and
not before. H04: a context limit that cuts the retrieved text ends episodes at the budget, and the truncation
metrics and diagnostic rise against the same run without it."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch
from support.episodes import taught_inputs
from support.models import chat_tokenizer
from support.settings import grpo_settings, report_settings, stage_json
from support.stages import run_main

from prefpipe import train_grpo
from prefpipe.common.io import read_jsonl
from prefpipe.generation.tokens import tokenize_prompts
from prefpipe.grpo.algorithm.spans import MASK_MODES, environment_loss_tokens, loss_spans
from prefpipe.grpo.analyses.health import check_run
from prefpipe.grpo.metric_names import (
    ENV_LOSS_SHARE,
    EPISODE_CONTEXT_CUT,
    EPISODE_ENV_TRAINED_SHARE,
    EPISODE_TRUNCATED_TURN,
    TRUNCATED_RATIO,
)
from prefpipe.grpo.rollout.episodes.episode import ENVIRONMENT, POLICY, Episode, episode_rollout
from prefpipe.grpo.training.episode_steps import not_policy_trained

# (owner, token count) per segment: episodes of different lengths and shapes, two per prompt
SHAPES = [
    [(POLICY, 3), (ENVIRONMENT, 5), (POLICY, 2)],
    [(POLICY, 1), (ENVIRONMENT, 2), (POLICY, 4), (ENVIRONMENT, 3), (POLICY, 1)],
    [(POLICY, 6)],
    [(POLICY, 2), (ENVIRONMENT, 7)],
]


def _episodes() -> list[Episode]:
    out = []
    for shape in SHAPES:
        ep = Episode()
        for owner, n in shape:
            ep.add(owner, [10 + len(ep.ids) + k for k in range(n)])
        out.append(ep)
    return out


def _env_tokens(episodes: list[Episode]) -> int:
    """Environment tokens counted from the segments' bounds (not from the owners list the walk reads)."""
    return sum(s.end - s.start for ep in episodes for s in ep.segments if s.owner == ENVIRONMENT)


@pytest.mark.parametrize("micro", [1, 3, 4])
@pytest.mark.parametrize("mask_mode", MASK_MODES)
def test_the_walk_counts_what_trained_outside_the_policys_segments(mask_mode, micro):
    tok, episodes = chat_tokenizer(), _episodes()
    batch = tokenize_prompts(tok, ["Which animal barks?", "Where do birds fly?"], None)
    rollout = episode_rollout(tok, batch, 2, episodes, tok.pad_token_id, torch.device("cpu"))
    spans = loss_spans(rollout, mask_mode, False, micro)
    wrong, total = not_policy_trained(spans, episodes)
    assert total == sum(int(sp.mask.sum()) for sp in spans)
    assert wrong == (_env_tokens(episodes) if mask_mode == "with_environment" else 0)
    assert wrong == environment_loss_tokens(rollout, spans)  # a right env_mask: both counts agree
    # a wrong env_mask (every token the policy's): the env_mask count is blind to it, the segment walk is not
    blind = dataclasses.replace(rollout, env_mask=rollout.completion_mask.clone())
    spans = loss_spans(blind, mask_mode, False, micro)
    assert environment_loss_tokens(blind, spans) == 0
    assert not_policy_trained(spans, episodes)[0] == _env_tokens(episodes)


EPISODES = {"enabled": True, "options": {"search": {"top_k": 1}}, "max_turns": 3, "max_turn_tokens": 40,
            "max_episode_tokens": 150}  # fmt: skip
RUN = {"steps": 4, "prompts_per_step": 2, "num_generations": 2, "learning_rate": 1e-3, "beta": 0.04,
       "temperature": 0.7, "checkpoint_every": 0, "mask_truncated_completions": False, "episodes": EPISODES,
       "rewards": [{"type": "exact_match", "weight": 1.0}]}  # fmt: skip
WRONG_FROM = 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """metrics.jsonl rows of the baseline, the H02 run (wrong mask from step 2) and the H04 run (a context of 40
    tokens after the prompt: the taught search call, 25-26 tokens, fits; its result, 48, is cut)."""
    root = taught_inputs(tmp_path_factory.mktemp("hypotheses"))
    changes = {
        "baseline": {},
        "h02": {"mask_mode": "with_environment", "mask_mode_from_step": WRONG_FROM},
        "h04": {"episodes": {**EPISODES, "max_episode_tokens": 40}},
    }
    out = {}
    for name, change in changes.items():
        settings = grpo_settings({**RUN, **change}, run=name, seed=0)
        code, _ = run_main(
            train_grpo.main, stage_json(settings), data=root / "data", policy=root / "policy",
            out=root / name,
        )  # fmt: skip
        assert code == 0
        out[name] = read_jsonl(root / name / "metrics.jsonl")
    return out


def _flag(rows: list[dict], check: str):
    (flag,) = check_run("run", pd.DataFrame(rows), report_settings().diagnostics, (check,))
    return flag


def test_h02_fires_at_the_step_the_wrong_mask_starts_and_not_before(runs):
    wrong = runs["h02"]
    for row in wrong:
        share = row[EPISODE_ENV_TRAINED_SHARE]
        assert (share > 0) == (row["step"] >= WRONG_FROM), row["step"]
        assert share == pytest.approx(row[ENV_LOSS_SHARE])  # the env_mask is right here: both agree
    print({r["step"]: round(r[EPISODE_ENV_TRAINED_SHARE], 3) for r in wrong})
    flag = _flag(wrong, "environment loss")
    assert (flag.status, flag.metric, flag.first_step) == ("flagged", EPISODE_ENV_TRAINED_SHARE, WRONG_FROM)
    assert flag.n_steps == len(wrong) - WRONG_FROM
    assert all(r[EPISODE_ENV_TRAINED_SHARE] == 0 for r in runs["baseline"])
    assert _flag(runs["baseline"], "environment loss").status == "ok"


def test_h04_a_context_limit_cuts_the_results_and_truncation_rises(runs):
    def mean(name: str, metric: str) -> float:
        return sum(r[metric] for r in runs[name]) / len(runs[name])

    keys = (TRUNCATED_RATIO, EPISODE_CONTEXT_CUT, EPISODE_TRUNCATED_TURN.format(turn=0))
    print({name: {k: round(mean(name, k), 3) for k in keys} for name in ("baseline", "h04")})
    assert mean("baseline", TRUNCATED_RATIO) < 0.5 and mean("h04", TRUNCATED_RATIO) == 1.0
    assert mean("h04", EPISODE_CONTEXT_CUT) > mean("baseline", EPISODE_CONTEXT_CUT)
    first_turn = EPISODE_TRUNCATED_TURN.format(turn=0)
    assert mean("h04", first_turn) > mean("baseline", first_turn)
    assert _flag(runs["h04"], "truncation").first_step == 0
