"""Whether the virtualenv running the tests was made by scripts/bootstrap.sh (so run.sh reuses it)."""

from __future__ import annotations

from pathlib import Path


def bootstrapped_for(venv: Path, extras: str = "dev,slurm") -> bool:
    """True when a bootstrap stamp in `venv` covers every extra in `extras` (test.sh installs a superset)."""
    wanted = set(extras.split(","))
    prefix = ".prefpipe-installed-"
    return any(wanted <= set(stamp.name[len(prefix) :].split(",")) for stamp in venv.glob(prefix + "*"))
