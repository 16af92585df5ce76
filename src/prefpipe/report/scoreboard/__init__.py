"""The scoreboard at the top of the report: at most five one-line verdicts first, then the boards they come from:
in an uncertainty experiment what to use when (uses.py); reward heads × headline benchmark, GRPO runs × their
changes and hacking, multi-turn runs × their held-out episode changes (episodes.py); every cell a link to the
table it comes from. Built from the same frames and section functions the sections use (never recomputed another
way); for a comparison the boards show each experiment's trees as mean ± sd (across.py; multi-turn runs:
across_episodes.py). A board with nothing to show is left out."""

from __future__ import annotations

from prefpipe.report.document import Claims, Paragraph, Section
from prefpipe.report.scoreboard import across, across_episodes, episodes, heads, runs, uses, verdicts
from prefpipe.report.sections import Context

TITLE, ANCHOR = "Scoreboard", "scoreboard"


def build(ctx: Context) -> Section | None:
    if ctx.others:
        boards = [across.heads_board(ctx), across.runs_board(ctx), across_episodes.board(ctx)]
    else:
        boards = [heads.board(ctx), runs.board(ctx), episodes.board(ctx)]
    boards.insert(0, uses.board(ctx))  # an uncertainty experiment's answer to "what to use when" comes first
    # The verdicts first: the ten-second read, then the boards they come from.
    blocks: list = []
    found = verdicts.build(ctx)
    if found and ctx.others:
        where = f"this run's tree ({ctx.tree.name}, seed {ctx.tree.seed})"
        blocks.append(
            Paragraph(f"Verdicts: the best head over the compared trees, the rest on {where}:", "note")
        )
    if found:
        blocks.append(Claims(found))
    blocks += [b for b in boards if b is not None]
    return Section(TITLE, blocks, ANCHOR) if blocks else None
