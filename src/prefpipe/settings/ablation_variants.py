"""The Bayesian GPM ablation's reward variants, derived from its fixes (`ablation.fixes`).

Each fix is named once, with what it does and the head.bayes values that undo it; the fixed values are
`reward.defaults.head.bayes`, which the reference variant keeps. With <head> the head type whose fixes they are
(`ablation.head`, bgpm):

  <broken>          <head> with every fix undone
  <head>-fix-<fix>  broken with only this fix: every other fix undone
  <head>-no-<fix>   <head> with only this fix undone (the reference without it, the reference being <head> at
                    the defaults)

They join `reward.variants` right after the variant named <head> (else after the reference), in the fixes'
order; they are declared whether or not the ablation rule runs, so an experiment may train any of them. A variant
of the same name written in the config is merged over its derived settings.
"""

from __future__ import annotations

from typing import Any

from prefpipe.settings.merge import deep_merge


def fix_variant_names(kind: str, fixes: dict[str, Any]) -> dict[str, dict[str, str]]:
    """fix -> {added: broken + only this fix, removed: the reference without only this fix} (variant names)."""
    return {fix: {"added": f"{kind}-fix-{fix}", "removed": f"{kind}-no-{fix}"} for fix in fixes}


def derived_variants(ablation: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The broken variant and each fix's two variants, as reward.variants entries (head type + head.bayes)."""
    fixes = ablation["fixes"]

    def variant(undone: list[str]) -> dict[str, Any]:
        bayes: dict[str, Any] = {}
        for fix in undone:
            bayes |= fixes[fix]["undo"]
        return {"head": {"type": kind, "bayes": bayes}}

    out = {ablation["broken"]: variant(list(fixes))}
    names = fix_variant_names(kind, fixes)
    out |= {names[fix]["added"]: variant([f for f in fixes if f != fix]) for fix in fixes}
    out |= {names[fix]["removed"]: variant([fix]) for fix in fixes}
    return out


def with_ablation_variants(raw: dict[str, Any]) -> None:
    """Add the ablation's derived variants to raw["reward"]["variants"] (a schema-valid config), in place."""
    variants, kind = raw["reward"]["variants"], raw["ablation"]["head"]
    derived = {
        name: deep_merge(spec, variants.get(name) or {})
        for name, spec in derived_variants(raw["ablation"], kind).items()
    }
    after = next((n for n in (kind, raw["ablation"]["reference"]) if n in variants), None)
    placed: dict[str, Any] = {}
    for name, spec in variants.items():
        if name not in derived:
            placed[name] = spec
        if name == after:
            placed |= derived
    if after is None:  # the ablation's check names the missing reference; keep the variants
        placed |= derived
    raw["reward"]["variants"] = placed
