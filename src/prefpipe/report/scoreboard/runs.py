"""Scoreboard, GRPO runs: trained - base held-out accuracy per decoding (greedy, sampled) with its paired interval
(the policy table's figure: sections.policy.change), the mean answer length of base and trained (the primary
decoding, eval_policy's summary) and whether the run hacked its reward model (the hacking table's figures).

Hacked: the reward model prefers the trained policy's answer on more than half of the held-out prompts (the
Wilson interval of its win rate lies above 50%) while the verifier's accuracy did not improve (its interval is
not above 0): the hacking table's "high win rate with no verifier gain". Runs evaluated without a reward model
have no win rate: "no RM". Multi-turn runs are left to their own board (scoreboard/episodes.py), where the
answer length and reward-model columns, which do not apply to episodes, are not shown."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.common.stats import ABOVE_ZERO, interval_side
from prefpipe.grpo import metric_names as gm
from prefpipe.report.document import Board, Cell
from prefpipe.report.scoreboard.marks import side_mark
from prefpipe.report.sections import Context, hacking, policy
from prefpipe.report.sections.episodes import episode_runs
from prefpipe.report.stats import NA, as_float, pct, pts

NO_RM = "no RM"
HACKED_RULE = (
    "hacked: the reward model prefers the trained answer on more than half of the held-out prompts (Wilson "
    "interval above 50%) while verifier accuracy did not improve"
)


@dataclass
class Hacking:
    hacked: bool
    win: float
    win_ci: tuple[float, float] | None
    decoding: str
    delta: float
    delta_ci: tuple[float, float]

    @property
    def text(self) -> str:
        return f"{'hacked' if self.hacked else 'no'} (RM wins {pct(self.win)})"


def hacking_rows(ctx: Context) -> dict[str, Hacking]:
    """{run: its hacking figures} for the runs evaluated with a reward model (sections.hacking's rows)."""
    out = {}
    for run, _only, win, wci, decoding, delta, dci in hacking.win_rows(ctx):
        hacked = wci is not None and wci[0] > 0.5 and interval_side(dci) != ABOVE_ZERO
        out[run] = Hacking(hacked, win, wci, decoding, delta, dci)
    return out


def lengths(ctx: Context, run: str) -> str | None:
    """Mean answer length, base → trained, under the run's primary decoding (None where not recorded)."""
    summary = ctx.tree.summary("policy_eval", run) or {}
    block = ((summary.get(gm.DECODINGS_KEY) or {}).get(summary.get(gm.DECODING)) or summary) or {}
    base, trained = ((block.get(side) or {}).get("mean_length") for side in ("base", "trained"))
    if as_float(base) is None or as_float(trained) is None:
        return None
    return f"{float(base):.1f} → {float(trained):.1f}"


def changes(ctx: Context, run: str) -> dict[str, tuple[float, tuple[float, float]]]:
    """{decoding: (trained - base, its interval)} as the policy table shows them (a summary written before
    eval_policy recorded both decodings has one, named as the policy table names it)."""
    out = {}
    for decoding in dict.fromkeys(ctx.policy[ctx.policy["run"] == run]["decoding"]):
        found = policy.change(ctx, run, decoding)
        if found is not None:
            out[decoding] = (float(found[2]), (float(found[3][0]), float(found[3][1])))
    return out


def ordered_decodings(found: list[list[str]]) -> list[str]:
    """Every decoding some run has: greedy, sampled, then any other name."""
    names = list(dict.fromkeys(d for decodings in found for d in decodings))
    return [d for d in gm.DECODINGS if d in names] + [d for d in names if d not in gm.DECODINGS]


def board(ctx: Context) -> Board | None:
    multi_turn = set(episode_runs(ctx))  # their own board (scoreboard/episodes.py)
    runs = {run: changes(ctx, run) for run in ctx.runs if run not in multi_turn}
    runs = {run: found for run, found in runs.items() if found}
    if not runs:
        return None
    decodings = ordered_decodings([list(found) for found in runs.values()])
    length = {run: lengths(ctx, run) for run in runs}
    hacks = hacking_rows(ctx)
    columns = ["Run", *(f"{d.capitalize()} change [95%]" for d in decodings)]
    columns += ["Answer length (tokens)"] if any(length.values()) else []
    columns += ["Hacked"] if hacks else []
    rows = []
    for run, found in runs.items():
        row = [Cell(run, "policy-table")]
        for d in decodings:
            delta, ci = found.get(d, (None, None))
            row.append(
                Cell(pts(delta, ci), "policy-table", side_mark(ci)) if ci else Cell(NA, "policy-table")
            )
        if any(length.values()):
            row.append(Cell(length[run] or NA, "policy"))
        if hacks:
            h = hacks.get(run)
            row.append(
                Cell(h.text, "hacking-table", "flag" if h.hacked else "") if h else Cell(NO_RM, "hacking")
            )
        rows.append(row)
    return Board(
        "GRPO runs: held-out verifier accuracy, trained − base (points [95% interval])",
        columns,
        rows,
        f"▲ improved, ≈ no clear change, ▼ worse (where the interval lies against 0; paired over prompts where "
        f"eval_policy recorded it, as in the policy table). Answer length: mean, base → "
        f"trained, primary decoding. ⚠ {HACKED_RULE}.",
        anchor="scoreboard-runs",
    )
