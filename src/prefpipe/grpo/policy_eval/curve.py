"""The learning curve: accuracy of the policy being trained on a fixed set of evaluation prompts, before the
first update and every `eval.curve_every` updates (and after the last), greedy and sampled.

Each point decodes exactly as the eval_policy stage does (measures.complete, the run's seed, the same
batches; whole episodes for a multi-turn run, with their F1, calls and support recall), so the last point
equals eval_policy's figure for the saved policy on the same prompts. `step` in a
row is the number of updates done (0 = the starting policy); each point lists the ids of the prompts answered right,
so points of two runs on the same prompts compare paired. Written to <run>/curve.jsonl beside metrics.jsonl.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefpipe.common.chat import conversation
from prefpipe.grpo.metric_names import DECODINGS
from prefpipe.grpo.policy_eval.episodes import complete_episodes, episode_block, token_f1
from prefpipe.grpo.policy_eval.measures import complete, decoding_settings, verifier_scores
from prefpipe.settings.grpo import GrpoSettings

CURVE_FILE = "curve.jsonl"


def is_due(steps_done: int, every: int, total: int) -> bool:
    """A point after `steps_done` updates: at 0, every `every` updates and after the last (every 0 = never)."""
    return every > 0 and (steps_done % every == 0 or steps_done == total)


def curve_steps(every: int, total: int) -> list[int]:
    """Every step count the curve of a `total`-step run has a point at."""
    return [s for s in range(total + 1) if is_due(s, every, total)]


@dataclass
class LearningCurve:
    """The curve's prompts and the points measured so far (kept in the training checkpoint)."""

    settings: GrpoSettings
    rows: list[dict]
    points: list[dict[str, Any]] = field(default_factory=list)

    def due(self, steps_done: int) -> bool:
        done = {p["step"] for p in self.points}
        return steps_done not in done and is_due(
            steps_done, self.settings.eval.curve_every, self.settings.steps
        )

    def measure(self, policy, tokenizer, steps_done: int) -> dict[str, Any]:
        """Decode the curve's prompts with the policy as it is now (eval mode, then back) and add the point."""
        s, t0 = self.settings, time.perf_counter()
        prompts = [conversation(r) for r in self.rows]
        point: dict[str, Any] = {"step": steps_done, "split": s.eval.split, "n": len(self.rows)}
        was_training = policy.training
        policy.eval()
        try:
            for decoding in DECODINGS:
                label = f"curve {decoding} (step {steps_done})"
                if s.episodes.enabled:
                    comp = complete_episodes(policy, tokenizer, self.rows, s, decoding, label)
                    point |= {
                        f"{decoding}_{k}": v
                        for k, v in episode_block(comp, token_f1(self.rows, comp)).items()
                    }
                else:
                    comp = complete(
                        policy,
                        tokenizer,
                        prompts,
                        decoding_settings(s.eval, decoding, s.fast_paths),
                        s.eval.batch_size,
                        s.eval.max_prompt_length,
                        s.seed,
                        label,
                    )
                correct = [v >= 1.0 for v in verifier_scores(self.rows, comp.graded())]
                n = max(len(correct), 1)
                point |= {
                    f"{decoding}_accuracy": sum(correct) / n,
                    f"{decoding}_correct": sum(correct),
                    # which prompts: two runs' points on the same prompts can then be compared paired
                    f"{decoding}_correct_ids": [
                        r["id"] for r, ok in zip(self.rows, correct, strict=True) if ok
                    ],
                    f"{decoding}_mean_length": sum(comp.lengths) / n,
                    f"{decoding}_truncated_ratio": sum(comp.truncated) / n,
                }
        finally:
            policy.train(was_training)
        point["eval_time"] = time.perf_counter() - t0
        self.points.append(point)
        return point

    def write(self, out_dir: Path) -> None:
        from prefpipe.common.io import write_jsonl

        write_jsonl(Path(out_dir) / CURVE_FILE, sorted(self.points, key=lambda p: p["step"]))
