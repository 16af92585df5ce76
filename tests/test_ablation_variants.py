"""The Bayesian GPM ablation's variants come from its named fixes (prefpipe.settings.ablation_variants): each
derived variant resolves to the head.bayes values written out here by hand from the fixes' meaning (every fix on
= the defaults; broken = every fix undone), in the order the config lists them, and a variant of the same name in
an overlay is merged over its derived settings."""

from __future__ import annotations

import pytest
from support.settings import pipeline

from prefpipe.common.config import ConfigError

FIXED = {  # reward.defaults.head.bayes: every fix on
    "kl_warmup_steps": 48,
    "max_kl_weight": 1.0e-4,
    "kl_mean": "normalized",
    "prior_variance": 10.0,
    "logvar_init_scale": 0.1,
    "logvar_init_variance": 0.1,
}
UNDO = {  # each fix's keys, off
    "warmup": {"kl_warmup_steps": 0},
    "klweight": {"max_kl_weight": 1.0},
    "klmean": {"kl_mean": "raw"},
    "prior": {"prior_variance": 1.0},
    "logvar": {"logvar_init_scale": 1.0, "logvar_init_variance": None},
}
BROKEN = {k: v for undo in UNDO.values() for k, v in undo.items()}
KEYS = tuple(FIXED)


def _bayes(settings, variant: str) -> dict:
    bayes = settings.reward[variant].head.bayes
    return {k: getattr(bayes, k) for k in KEYS}


def test_every_derived_variant_is_the_fixes_meaning():
    settings = pipeline()
    assert list(settings.reward) == [
        "bt",
        "gpm",
        "bgpm",
        "bgpm-broken",
        *(f"bgpm-fix-{fix}" for fix in UNDO),
        *(f"bgpm-no-{fix}" for fix in UNDO),
    ]
    assert _bayes(settings, "bgpm") == FIXED
    assert _bayes(settings, "bgpm-broken") == BROKEN
    for fix, undo in UNDO.items():
        assert _bayes(settings, f"bgpm-fix-{fix}") == {**BROKEN, **{k: FIXED[k] for k in undo}}, fix
        assert _bayes(settings, f"bgpm-no-{fix}") == {**FIXED, **undo}, fix
        assert settings.reward[f"bgpm-no-{fix}"].head.type == "bgpm"
    pairs = {fix: (p.added, p.removed) for fix, p in settings.ablation.fixes.items()}
    assert pairs == {fix: (f"bgpm-fix-{fix}", f"bgpm-no-{fix}") for fix in UNDO}


def test_an_overlay_variant_of_a_derived_name_is_merged_over_it():
    overlay = {"seed": 7, "head": {"bayes": {"logvar_clamp": [-6.0, 2.0]}}}
    settings = pipeline({"reward": {"variants": {"bgpm-fix-prior": overlay}}})
    fixed_prior = {**BROKEN, "prior_variance": 10.0}
    assert _bayes(settings, "bgpm-fix-prior") == fixed_prior
    variant = settings.reward["bgpm-fix-prior"]
    assert variant.seed == 7 and tuple(variant.head.bayes.logvar_clamp) == (-6.0, 2.0)


def test_a_fix_is_refused_without_its_meaning_or_with_an_unknown_key():
    with pytest.raises(ConfigError, match=r"ablation\.fixes\.prior\.does: None is not of type 'string'"):
        pipeline({"ablation": {"fixes": {"prior": {"does": None}}}})
    with pytest.raises(ConfigError, match=r"ablation\.fixes\.prior\.undo.*prior_varianse"):
        pipeline({"ablation": {"fixes": {"prior": {"undo": {"prior_varianse": 1.0}}}}})
