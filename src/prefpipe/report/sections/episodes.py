"""GRPO with tools: a multi-turn run's training episodes step by step (the final answer's exact-match reward,
answered share, tool calls, environment-token share, truncation), its held-out questions before and after
(exact match, token F1, tool calls and support recall, trained - base paired over the questions, as eval_policy
recorded them: frames.episodes), what limits the policy on them (each episode's failure class, primary decoding:
frames.episode_failures) and per run the episode diagnostics, first steps against last steps, with the
step at which a wrong mask (H02) or the token budget (H04) first shows. Left out when no run has episodes."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from prefpipe.common.stats import ABOVE_ZERO, BELOW_ZERO, STRADDLES_ZERO, interval_side
from prefpipe.grpo import metric_names as gm
from prefpipe.grpo.analyses.health import first_above
from prefpipe.report import frames
from prefpipe.report.document import Claim, Details, Section, Table
from prefpipe.report.sections import Context, note
from prefpipe.report.sections.calibration import groups
from prefpipe.report.sections.policy import verdict
from prefpipe.report.sections.reward_training import training_figures
from prefpipe.report.stats import NA, num, pct, pts
from prefpipe.settings.report import Thresholds

TITLE, ANCHOR = "GRPO with tools: multi-turn episodes", "episodes"
PANELS = (
    (gm.REWARD_MEAN, "Reward (exact match of the final answer)", False),
    (gm.EPISODE_ANSWERED, "Episodes that answered", False),
    (gm.EPISODE_CALLS, "Tool calls per episode", False),
    (gm.EPISODE_ENV_TOKEN_SHARE, "Environment-token share", False),
    (gm.TRUNCATED_RATIO, "Episodes ended at the token budget", False),
    (gm.EPISODE_SUPPORT_RECALL, "Support recall (training)", False),
)
# the trainer's summary compares its first and last five steps too (grpo/training/trainer.py)
WINDOW = 5
Fires = Callable[[Thresholds], float] | None  # the threshold above which a row's value is a fired diagnostic


def _rows(max_turns: int) -> list[tuple[str, str, Fires]]:
    """(metric, label, threshold) of the diagnostics table; turn rows up to the run's max_turns."""
    errors = [
        (gm.EPISODE_ENV_ERRORS.format(kind=k), f"environment: {k.replace('_', ' ')} per episode", None)
        for k in ("malformed_call", "unknown_tool", "environment_error", "empty_result", "result_cut")
    ]
    turns = [
        row
        for k in range(max_turns)
        for row in (
            (gm.EPISODE_CONTEXT_TURN.format(turn=k), f"context after turn {k} (tokens)", None),
            (gm.EPISODE_TRUNCATED_TURN.format(turn=k), f"ended by the budget at turn {k}", None),
        )
    ]
    return [
        (gm.EPISODE_TURNS, "policy turns per episode", None),
        (gm.EPISODE_CALLS, "tool calls per episode", None),
        (gm.EPISODE_ANSWERED, "answered", None),
        *errors,
        (gm.EPISODE_ENV_TOKEN_SHARE, "environment-token share", None),
        (
            gm.EPISODE_ENV_TRAINED_SHARE,
            "loss tokens no policy segment holds (H02)",
            lambda t: t.env_loss_share_max,
        ),
        (gm.ENV_LOSS_SHARE, "loss tokens with env_mask 0", lambda t: t.env_loss_share_max),
        (gm.TRUNCATED_RATIO, "ended at the token budget (H04)", lambda t: t.truncated_ratio_max),
        (gm.EPISODE_CONTEXT_CUT, "result cut by the budget (H04)", None),
        *turns,
        (gm.EPISODE_ANSWER_FOUND, "answer in a result", None),
        (gm.EPISODE_SUPPORT_RECALL, "support recall", None),
    ]


def episode_runs(ctx: Context) -> list[str]:
    """Runs whose GRPO config rolls out episodes, or whose evaluation recorded episode figures."""
    evaluated = set(frames.episodes(ctx.tree)["run"])
    return [
        r
        for r in ctx.runs
        if r in evaluated or ((ctx.tree.config("grpo", r) or {}).get("episodes") or {}).get("enabled")
    ]


def window_means(frame: pd.DataFrame, metric: str) -> tuple[float | None, float | None]:
    """Mean of a metric over a run's first and last WINDOW logged steps (steps that logged it)."""
    if metric not in frame:
        return None, None
    values = frame.sort_values("step", kind="stable")[metric].dropna().astype(float)
    if values.empty:
        return None, None
    return float(values.iloc[:WINDOW].mean()), float(values.iloc[-WINDOW:].mean())


def _diagnostics(ctx: Context, run: str, frame: pd.DataFrame) -> Table | None:
    max_turns = int(((ctx.tree.config("grpo", run) or {}).get("episodes") or {}).get("max_turns") or 0)
    rows, classes, n = [], [], min(WINDOW, len(frame))
    for metric, label, fires in _rows(max_turns):
        first, last = window_means(frame, metric)
        if first is None:
            continue
        step = first_above(frame, metric, fires(ctx.settings.diagnostics)) if fires else None
        rows.append([label, num(first), num(last), NA if step is None else str(step)])
        classes.append("flag" if step is not None else "")
    if not rows:
        return None
    return Table(
        f"Episode diagnostics, {run}",
        ["Measure", f"First {n} steps", f"Last {n} steps", "Fires at step"],
        rows,
        "Means over the run's first and last logged steps (metrics.jsonl). Fires at step: the first step "
        "above report.diagnostics' limit, for the measures that have one (env_loss_share_max for a loss on "
        "tokens that are not the policy's, truncated_ratio_max for the token budget).",
        classes,
        anchor=f"episodes-diagnostics-{run}",
    )


def _value(value: float | None, share: bool) -> str:
    return pct(value) if share else num(value, 3)


def change_text(r: pd.Series) -> str:
    """A paired change as the paired table shows it: points for shares, calls for tool calls."""
    if pd.isna(r["delta"]):
        return NA
    ci = None if pd.isna(r["lo"]) else (float(r["lo"]), float(r["hi"]))
    if r["share"]:
        return pts(float(r["delta"]), ci)
    return f"{float(r['delta']):+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")


# a change in tool calls is neither better nor worse: its words say only where the interval lies
COUNT_WORDS = {ABOVE_ZERO: "more", STRADDLES_ZERO: "no clear change", BELOW_ZERO: "fewer"}


def change_word(r: pd.Series) -> str:
    """The policy table's verdict for a share (improved / no clear change / worse); more / fewer for calls."""
    if pd.isna(r["lo"]):
        return NA
    ci = (float(r["lo"]), float(r["hi"]))
    return verdict(ci) if r["share"] else COUNT_WORDS[interval_side(ci)]


def _paired_table(table: pd.DataFrame) -> Table:
    rows = [
        [
            r["run"],
            r["decoding"],
            r["measure"],
            _value(r["base"], r["share"]),
            _value(r["trained"], r["share"]),
            change_text(r),
            change_word(r),
            NA if pd.isna(r["n"]) else str(int(r["n"])),
        ]
        for _, r in table.iterrows()
    ]
    return Table(
        "Held-out questions before and after GRPO: whole episodes",
        ["Run", "Decoding", "Measure", "Base", "Trained", "Change [95%]", "Verdict", "Questions"],
        rows,
        "Each held-out question answered by one episode of the base and of the trained policy through the "
        "run's environment. Change: trained - base paired over the questions (percentile bootstrap; support "
        "recall over the questions with supporting paragraphs); shares in points, tool calls in calls.",
        anchor="episodes-paired",
    )


def _failure_table(table: pd.DataFrame) -> Table:
    def cell(share: float, n: float) -> str:
        return NA if pd.isna(share) else pct(share) + ("" if pd.isna(n) else f" ({int(n)})")

    rows = [
        [r["run"], r["decoding"], r["what"].replace("_", " "), cell(r["base"], r["base_n"]),
         cell(r["trained"], r["trained_n"])]
        for _, r in table.iterrows()
    ]  # fmt: skip
    return Table(
        "What limits the policy on held-out questions: each episode in one class",
        ["Run", "Decoding", "Class", "Base", "Trained"],
        rows,
        "The first class that applies: correct; no search (no valid tool call); answer seen wrong / missing (a "
        "result held the answer, the final answer is another one / none); support no answer (a supporting "
        "paragraph retrieved, no result held the answer); no support (searched, no supporting paragraph). "
        "Limits: search = no search + no support + support no answer; reading = answer seen wrong; answering "
        "= answer seen missing (grpo/analyses/episode_failures.py). Share of questions (count).",
        anchor="episodes-failures",
    )


def claims(ctx: Context) -> list[Claim]:
    """Per multi-turn run, what its episodes add to the policy section's exact-match claim (primary decoding):
    token F1, tool calls and support recall, base → trained (change)."""
    table = frames.episodes(ctx.tree)
    table = table[table["measure"] != frames.EXACT_MATCH]
    out = []
    for run in dict.fromkeys(table["run"]):
        mine = table[(table["run"] == run) & table["primary"]]
        parts = [
            f"{r['measure']} {_value(r['base'], r['share'])} → {_value(r['trained'], r['share'])} ({change_text(r)})"
            for _, r in mine.iterrows()
        ]
        if parts:
            decoding = mine["decoding"].iloc[0]
            out.append(
                Claim(
                    f"Multi-turn run {run}, held-out episodes ({decoding}): " + "; ".join(parts) + ".",
                    "episodes-paired",
                )
            )
    return out


def build(ctx: Context) -> Section | None:
    runs = episode_runs(ctx)
    if not runs:
        return None
    metrics = frames.metrics(ctx.tree, "grpo_metrics", "run")
    metrics = metrics[metrics["run"].isin(runs)] if not metrics.empty else metrics
    trained = [r for r in runs if not metrics.empty and r in set(metrics["run"])]
    blocks: list = training_figures(ctx, metrics, groups(trained, []), "run", PANELS, "episodes")
    if trained and not blocks:
        blocks.append(
            note("Every per-step episode measure is constant over the logged steps: no curve drawn.")
        )
    table = frames.episodes(ctx.tree)
    table = table[table["run"].isin(runs)]
    if table.empty:
        blocks.append(note("No held-out evaluation of these runs recorded episode figures yet."))
    else:
        blocks.append(_paired_table(table))
    failures = frames.episode_failures(ctx.tree)
    failures = failures[failures["run"].isin(runs) & failures["primary"]]
    if not failures.empty:
        blocks.append(_failure_table(failures))
    for run in trained:
        diagnostics = _diagnostics(ctx, run, metrics[metrics["run"] == run])
        if diagnostics is None:
            continue
        # beside other runs, a run whose limits all held is collapsed (a grid's tables would fill the page)
        quiet = len(trained) > 1 and "flag" not in diagnostics.row_classes
        blocks.append(
            Details(f"{diagnostics.title}: no limit crossed", [diagnostics]) if quiet else diagnostics
        )
    return Section(TITLE, blocks, ANCHOR)
