"""Scoreboard, what to use when (docs/findings/UNCERTAINTY.md, ACTIVE_LEARNING.md, RISK_RL.md): for each use a
head's uncertainty is bought for, the head or ensemble that does it best, by how much and with its interval,
read from the summaries the stages write: calibration (each evaluated head's ECE), unfamiliar inputs, errors and
label disagreement (the AUROC of every recorded uncertainty in the eval and eval_ensemble `uncertainty` blocks),
label saving (the active-learning summary, uses_seeds.py) and RL safety (the risk-averse GRPO runs' hacking gaps
against their k = 0 controls, paired by seed, uses_seeds.py). A use with nothing recorded is left out; the board
appears only in an uncertainty experiment (a recorded disagreement or unfamiliar target, an active-learning
summary or a risk-averse run), so the default report keeps its first screen."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.evaluation.calibration import ECE
from prefpipe.evaluation.summary_keys import AUROC, DISAGREEMENT, ERRORS, MARGIN, UNFAMILIAR
from prefpipe.report.document import Board, Cell
from prefpipe.report.scoreboard.uses_seeds import label_saving, rl_safety
from prefpipe.report.scoreboard.uses_types import Use, apart
from prefpipe.report.sections import Context, calibration, uncertainty
from prefpipe.report.stats import as_float

ANCHOR = "scoreboard-uses"
AUROC_USES = {
    UNFAMILIAR: ("Unfamiliar inputs", "AUROC: kinds never trained on"),
    ERRORS: ("Errors", "AUROC: the head's own errors"),
    DISAGREEMENT: ("Label disagreement", "AUROC: kinds with flipped labels"),
}
SHORT = {MARGIN: "-|margin|"}  # the board's cells are narrow; the uncertainty table says the rest
EXPERIMENT_TARGETS = (UNFAMILIAR, DISAGREEMENT)


@dataclass
class _Entry:
    head: str
    measure: str
    value: float
    low: float | None
    high: float | None


def _entries(ctx: Context, target: str) -> list[_Entry]:
    """Per head (variant or ensemble) its best recorded uncertainty for `target`, best head first."""
    best: dict[str, _Entry] = {}
    for head, block in uncertainty.blocks(ctx).items():
        for measure, a in ((block.get(AUROC) or {}).get(target) or {}).items():
            value = as_float(a.get("value")) if isinstance(a, dict) else None
            if value is None or (head in best and best[head].value >= value):
                continue
            label = SHORT.get(measure) or uncertainty.LABELS.get(measure, measure)
            best[head] = _Entry(head, label, value, a["low"], a["high"])
    return sorted(best.values(), key=lambda e: -e.value)


def _said(e: _Entry) -> str:
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def auroc_use(ctx: Context, target: str) -> Use | None:
    """The head whose uncertainty flags `target` best against the best of every other head; resolved when the
    runner-up's interval stays below the winner's (the AUROCs are not paired, so no interval of the gap)."""
    found = _entries(ctx, target)
    if not found:
        return None
    name, what = AUROC_USES[target]
    win = found[0]
    use = Use(name, what, f"{win.head}: {win.measure}", _said(win), uncertainty.TABLE_ANCHOR)
    if len(found) > 1:
        run = found[1]
        use.runner, use.runner_figure = f"{run.head}: {run.measure}", _said(run)
        use.by = f"{win.value - run.value:+.3f}"
        use.resolved = run.high < win.low
        use.by += "; intervals apart" if use.resolved else "; intervals overlap"
    return use


def _ece(block: dict, interval: object) -> _Entry | None:
    """A head's ECE (its calibration block) with the interval its uncertainty block records beside it."""
    value = as_float(block.get(ECE))
    if value is None:
        return None
    if isinstance(interval, dict) and as_float(interval.get("low")) is not None:
        return _Entry("", "", value, float(interval["low"]), float(interval["high"]))
    return _Entry("", "", value, None, None)


def _ece_text(e: _Entry) -> str:
    return f"{e.value:.4f}" if e.low is None else f"{e.value:.4f} [{e.low:.4f}, {e.high:.4f}]"


def calibration_use(ctx: Context) -> Use | None:
    """The evaluated head with the lowest ECE on the headline benchmark; resolved when the runner-up's interval
    (the eval stage's bootstrap, in the uncertainty block) stays above the best's; unmarked without intervals."""
    blocks = uncertainty.blocks(ctx)
    eces = {
        v: e
        for v, b in calibration.calibration_blocks(ctx).items()
        if (e := _ece(b, (blocks.get(v) or {}).get(ECE))) is not None
    }
    if not eces:
        return None
    best, *rest = sorted(eces, key=lambda v: eces[v].value)
    win = eces[best]
    use = Use("Calibration", "ECE ↓", best, _ece_text(win), "calibration-table")
    if rest:
        run = eces[rest[0]]
        use.runner, use.runner_figure = rest[0], _ece_text(run)
        use.by = f"{win.value - run.value:+.4f}"
        if win.low is not None and run.low is not None:
            use.resolved = run.low > win.high
    return use


def _is_uncertainty_experiment(ctx: Context, uses: list[Use]) -> bool:
    recorded = any(
        target in (block.get(AUROC) or {})
        for block in uncertainty.blocks(ctx).values()
        for target in EXPERIMENT_TARGETS
    )
    return recorded or any(u.name in ("Label saving", "RL safety") for u in uses)


def uses(ctx: Context) -> list[Use]:
    found = [
        calibration_use(ctx),
        auroc_use(ctx, UNFAMILIAR),
        auroc_use(ctx, ERRORS),
        auroc_use(ctx, DISAGREEMENT),
        label_saving(ctx),
        rl_safety(ctx),
    ]
    return [u for u in found if u is not None]


def board(ctx: Context) -> Board | None:
    found = uses(ctx)
    if not found or not _is_uncertainty_experiment(ctx, found):
        return None
    rows = [
        [
            Cell(u.name, u.anchor),
            Cell(u.measure, u.anchor),
            Cell(u.winner, u.anchor, apart(u.resolved)),
            Cell(u.figure, u.anchor),
            Cell(u.by or "–", u.anchor),
            Cell(u.runner or "–", u.anchor),
            Cell(u.runner_figure or "–", u.anchor),
        ]
        for u in found
    ]
    return Board(
        "What to use when: the head or ensemble that does each job best",
        ["Use", "Measured by", "Best", "Its figure [95%]", "Ahead by", "Runner-up", "Its figure"],
        rows,
        "★ resolved: the runner-up's interval (or the paired interval of the gap, over seeds) stays clear of the "
        "best's; ☆ not resolved; unmarked: no interval recorded. AUROC (0.5 = no information): each head's best "
        "recorded uncertainty (Uncertainty table). Labels saved: 1 − the labels a strategy needs to reach the "
        "target / the labels random selection needs, per seed (target: random's accuracy after its last round, "
        "or a fraction of the full-data accuracy where the rounds ran over the whole pool). RL safety: a "
        "risk-averse run's hacking gap minus that of the run paid by the same reward model without aversion. "
        "Over seeds: mean with a t interval.",
        anchor=ANCHOR,
    )
