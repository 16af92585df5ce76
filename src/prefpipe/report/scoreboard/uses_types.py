"""One row of the what-to-use-when board (uses.py): the use, the head or ensemble that does it best, its figure
with its interval, the runner-up and the gap, and whether the gap is resolved by the intervals."""

from __future__ import annotations

from dataclasses import dataclass

LEVEL = 0.95  # the board's interval level for figures over seeds, as its header says ([95%])


@dataclass
class Use:
    name: str
    measure: str
    winner: str
    figure: str
    anchor: str
    runner: str = ""
    runner_figure: str = ""
    by: str = ""
    resolved: bool | None = None  # None: no interval to say


def apart(resolved: bool | None) -> str:
    """The winner cell's mark: resolved (★), not resolved (☆), or none where no interval was recorded."""
    return "" if resolved is None else ("best" if resolved else "best_unresolved")
