"""Does a pretrained policy's GRPO group on real multi-hop questions carry any signal? Sample G episodes for
each of N training questions (the experiment config's prompts, search environment, tool format and limits) and
print exact match and token F1 of the answers, the share of groups whose exact-match (or F1) rewards are not
all equal (a group with equal rewards has zero advantage and trains nothing), tool calls per episode, support
recall, answer found in a result, and the seconds it took.

python benchmarks/multihop_real_base.py MODEL_DIR CONFIG [OVERLAY ...] [--questions 32] [--group 8] [--run NAME]
    [--out FILE.json]

CONFIG is an experiment config (e.g. config/experiments/multihop_real.yaml, with data.prompts pointing at the
files to try); MODEL_DIR a saved policy folder (the import_model rule's results/<exp>/models/<name>/model).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prefpipe.common.chat import conversation
from prefpipe.config_checks import checked_pipeline
from prefpipe.data.rl_prompts import load_rl_prompt_rows
from prefpipe.data.verifier import score
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.generate import generate_episodes
from prefpipe.grpo.rollout.episodes.measures import answer_found, support_recall, supporting_titles
from prefpipe.grpo.rollout.episodes.tool_formats import build_tool_format
from prefpipe.settings.pipeline import load_config


def _varies(values: list[float]) -> bool:
    return max(values) > min(values)


def measure(model, tok, rows: list[dict], run, group: int, seed: int) -> dict:
    """Sampled groups (temperature 1) of `group` episodes per row and what they give."""
    ep = run.episodes
    spec = ep.environment_spec()
    fmt = build_tool_format(ep.tool_format, tok, build_environment(spec).tools, "tool_format")
    n = len(rows) * group
    uniforms = torch.rand(n, ep.max_episode_tokens, generator=torch.Generator().manual_seed(seed))
    batch = generate_episodes(
        model,
        tok,
        rows,
        [conversation(dict(r)) for r in rows],
        group,
        lambda: EnvironmentRunner(build_environment(spec), ep.max_result_chars),
        fmt,
        EpisodeLimits(ep.max_turns, ep.max_turn_tokens, ep.max_episode_tokens),
        Sampling(uniforms, 1.0, 0, 1.0),
        run.eval.max_prompt_length,
    )
    em, f1, recall, found, calls, groups_em, groups_f1 = [], [], [], [], [], 0, 0
    for i, row in enumerate(rows):
        eps = batch.episodes[i * group : (i + 1) * group]
        got = batch.retrieved[i * group : (i + 1) * group]
        e = [score("exact_match", row["answer"], x.answer or "", row["aliases"]) for x in eps]
        f = [score("token_f1", row["answer"], x.answer or "", row["aliases"]) for x in eps]
        em += e
        f1 += f
        groups_em += _varies(e)
        groups_f1 += _varies(f)
        recall += [support_recall(supporting_titles(row), g or []) or 0.0 for g in got]
        found += [float(answer_found(x, [row["answer"], *row["aliases"]])) for x in eps]
        calls += [len(x.calls) for x in eps]
    return {
        "exact_match": sum(em) / n,
        "token_f1": sum(f1) / n,
        "groups_with_em_signal": groups_em / len(rows),
        "groups_with_f1_signal": groups_f1 / len(rows),
        "calls_per_episode": sum(calls) / n,
        "support_recall": sum(recall) / n,
        "answer_found": sum(found) / n,
        "answered": sum(x.answer is not None for x in batch.episodes) / n,
        "example": tok.decode(batch.episodes[0].ids, skip_special_tokens=True)[:600],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("config", nargs="+", help="the experiment config, then overlays merged over it")
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--run", default=None, help="grpo run name (default: the config's first)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    pipe = checked_pipeline(load_config(*args.config), threads=2)
    run = pipe.grpo[args.run or next(iter(pipe.grpo))]
    train, _, _ = load_rl_prompt_rows(pipe.data.prompts, "drop", pipe.data.seed)
    rows = train[: args.questions]
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    start = time.perf_counter()
    out = measure(model, tok, rows, run, args.group, pipe.data.seed)
    out |= {"questions": len(rows), "group": args.group, "seconds": round(time.perf_counter() - start, 1)}
    out |= {"prompts_path": pipe.data.prompts.path}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
