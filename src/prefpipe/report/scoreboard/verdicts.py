"""Scoreboard verdicts: at most five one-line answers read off the same figures as the boards and sections: the
best head and whether it is resolved from the runner-up, the cyclic set, the fix that matters most, the GRPO run
that helped most and the run(s) that hacked. A verdict with nothing to read it from is left out."""

from __future__ import annotations

from prefpipe.common.stats import ABOVE_ZERO, interval_side
from prefpipe.evaluation.accuracy_summary import OVERALL
from prefpipe.evaluation.summary_keys import MOST_IMPORTANT, ROWS
from prefpipe.grpo import metric_names as gm
from prefpipe.report import frames
from prefpipe.report.document import Claim
from prefpipe.report.scoreboard import across, heads, runs
from prefpipe.report.sections import Context, ablation, rewardbench
from prefpipe.report.sections.episodes import episode_runs
from prefpipe.report.stats import pct, pts


def best_head(ctx: Context) -> Claim | None:
    """The best head overall and whether any other head's interval reaches it (the answers' rule)."""
    frame = ctx.headline_scores()
    overall = frame[(frame["item"] == frames.OVERALL) & frame["variant"].isin(heads.heads(ctx))]
    overall = overall.sort_values("score", ascending=False)
    if len(overall) < 2:
        return None
    best, runner = overall.iloc[0], overall.iloc[1]
    overlap = any(r["hi"] >= best["lo"] for _, r in overall.iloc[1:].iterrows() if r["hi"] == r["hi"])
    how = "not resolved from" if overlap else "ahead, beyond the intervals, of"
    return Claim(
        f"Best head on {ctx.bench}: {best['variant']} {rewardbench.said(best)}, {how} the runner-up "
        f"{runner['variant']} {rewardbench.said(runner)}.",
        "rewardbench-table",
    )


def cyclic(ctx: Context) -> Claim | None:
    found = rewardbench.cyclic_pair(ctx, heads.heads(ctx))
    if found is None:
        return None
    name, g, scalar, b = found
    verb = "clears" if rewardbench.learns_cycle(g) else "does not clear"
    text = f"Cyclic set: {name} {rewardbench.said(g)} {verb} the 66.7% a scalar reward can reach"
    text += f" ({scalar} {rewardbench.said(b)})." if scalar and b is not None else "."
    return Claim(text, "rewardbench-table")


def fix(ctx: Context) -> Claim | None:
    """The ablation stage's most important fix (the first protocol: the heads as fine-tuned where scored), else
    the ablation variant with the largest change beyond its interval against the broken one."""
    paired = ablation.paired_summary(ctx)
    found = ablation.protocols(paired) if paired is not None else []
    if found:
        block, label, anchor = found[0]
        best = (block.get(MOST_IMPORTANT) or {}).get("overall")
        if best is None:
            return Claim(f"No Bayesian fix clears its interval, on {label}.", anchor)
        rows = [r for r in block[ROWS] if r["fix"] == best and OVERALL in r["items"]]
        row = max(rows, key=lambda r: r["items"][OVERALL]["fix_effect"])
        where = (
            f"added to {paired['broken']}"
            if row["kind"] == "added"
            else f"removed from {paired['reference']}"
        )
        return Claim(
            f"Fix that matters most, on {label}: {best}, {ablation.fix_cell(row['items'][OVERALL])} points "
            f"({where}).",
            anchor,
        )
    ordered, broken = ablation.order(ctx)
    if broken is None:
        return None
    reference = ctx.settings.ablation.reference
    changes = [(v, c) for v in ordered[1:] if v != reference and (c := ablation.fix_change(ctx, v, broken))]
    helped = [(v, c) for v, c in changes if interval_side(c[1]) == ABOVE_ZERO]
    if not changes:
        return None
    if not helped:
        return Claim(
            f"No Bayesian fix changes the overall score beyond its interval vs {broken}.", "ablation-table"
        )
    v, (delta, ci) = max(helped, key=lambda vc: vc[1][0])
    return Claim(f"Fix that matters most (vs {broken}): {v}, {pts(delta, ci)} overall.", "ablation-table")


def grpo(ctx: Context) -> Claim | None:
    """The run whose primary decoding improved most (an interval above 0), else the largest change said as such.
    Single-turn runs only where there are any: a multi-turn run's held-out set is another task (the multi-hop
    world's questions), whose figures its own board shows."""
    multi_turn = set(episode_runs(ctx))
    found = []
    for run in [r for r in ctx.runs if r not in multi_turn] or list(ctx.runs):
        primary = (ctx.tree.summary("policy_eval", run) or {}).get(gm.DECODING)
        by_decoding = runs.changes(ctx, run)
        decoding = primary if primary in by_decoding else next(iter(by_decoding), None)
        if decoding is not None:
            found.append((run, decoding, *by_decoding[decoding]))
    if not found:
        return None
    improved = [f for f in found if interval_side(f[3]) == ABOVE_ZERO]
    run, decoding, delta, ci = max(improved or found, key=lambda f: f[2])
    if improved:
        return Claim(
            f"GRPO helped most: {run}, held-out accuracy {pts(delta, ci)} ({decoding}).", "policy-table"
        )
    return Claim(
        f"No GRPO run improved held-out accuracy beyond its interval (largest: {run}, {pts(delta, ci)}, "
        f"{decoding}).",
        "policy-table",
    )


def hacked(ctx: Context) -> Claim | None:
    rows = runs.hacking_rows(ctx)
    if not rows:
        return None
    found = [(run, h) for run, h in rows.items() if h.hacked]
    if not found:
        return Claim(f"No run hacked its reward model ({len(rows)} evaluated with one).", "hacking-table")
    if len(found) == 1:
        run, h = found[0]
        return Claim(
            f"Hacked: {run} (RM prefers it on {pct(h.win, h.win_ci)} of prompts, verifier "
            f"{pts(h.delta, h.delta_ci)}).",
            "hacking-table",
        )
    wins = sorted(h.win for _, h in found)
    spread = pct(wins[0]) if wins[0] == wins[-1] else f"{pct(wins[0])}–{pct(wins[-1])}"
    return Claim(
        f"Hacked: {', '.join(run for run, _ in found)} (RM prefers their answers on {spread} of prompts; "
        "verifier accuracy not improved).",
        "hacking-table",
    )


VERDICTS = (best_head, cyclic, fix, grpo, hacked)


def build(ctx: Context) -> list[Claim]:
    """The verdicts; in a comparison the best head is read over this experiment's trees (across.best_head)."""
    first = across.best_head if ctx.others else best_head
    return [c for verdict in (first, *VERDICTS[1:]) if (c := verdict(ctx)) is not None][:5]
