"""A section map (section -> its subsets, as `data.sections` and a benchmark's `sections` write it) read the
other way round: each subset's one section."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prefpipe.common.config import ConfigError


def subset_sections(sections: Mapping[str, Iterable[str]], key: str) -> dict[str, str]:
    """subset -> its section; ConfigError naming `key` when a subset is listed under two sections."""
    mapped: dict[str, str] = {}
    for section, names in sections.items():
        for name in names:
            if name in mapped:
                raise ConfigError(
                    f"{key}: subset {name!r} is listed under both {mapped[name]!r} and {section!r}"
                )
            mapped[name] = section
    return mapped
