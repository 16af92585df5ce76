"""Reward functions for GRPO, combined as a weighted sum configured in `grpo.rewards`.

Every function maps the decoded completions of a batch to one float per completion. Each `grpo.rewards[].type`
is a registered reward source (REWARD_SOURCES: name -> factory(spec, reward_model)); a spec arrives COMPLETE,
its defaults filled from workflow/schemas/grpo.schema.yaml ($defs.reward_fn) by the settings layer, so the
factories read keys without fallbacks. A new source is one function under `@register_reward_source`.

Reward models keep their own tokenizer: completions are decoded to text here and the reward model
re-tokenizes (rm.encode), so a policy/reward-model vocabulary mismatch cannot silently misalign tokens.
Reward-model rewards follow what the head offers:
  scalar heads (BT)  the scalar reward r(x, y) (or s(y > y_ref) = r(y) - r(y_ref) against a reference)
  pairwise (GPM)     group-relative preference: r_i = mean_{j != i} s(y_i > y_j | x) over the prompt's G
                     completions, or s(y_i > y_ref | x) against a reference completion (GPO's opponent)
  Bayesian (bgpm)    the same with the posterior-mean score; risk_aversion lambda > 0 pays what risk_measure
                     says per comparison (prefpipe.grpo.risk_measures): sd, s - lambda * std(s) (a lower
                     confidence bound), or mutual_information, the predictive P(a > b) - lambda * I (the
                     posterior's mutual information with the label, its epistemic part)
  deep ensemble      (reward.ensemble: a run's reward_model naming an eval.ensembles entry) the members' mean
                     score (scalar members: mean r_m(x, y); else mean s_m per comparison); risk_aversion lambda
                     uses mean - lambda * sd over members (sample sd, n - 1, eval_ensemble's score_sd)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prefpipe.common.config import ConfigError
from prefpipe.data.answers import normalize_answer, token_f1  # re-exported: one implementation
from prefpipe.data.verifier import score
from prefpipe.grpo.risk_measures import RISK_MEASURES

__all__ = ["normalize_answer", "token_f1"]


@dataclass
class RewardInputs:
    prompts: list[str]  # raw prompt of each completion (N = prompts * G, prompt-major)
    completions: list[str]  # decoded up to the first EOS, special tokens removed
    answers: list[str | None]  # None: the prompt has no answer (only reward-model / format rewards apply)
    kinds: list[str]
    terminated: list[bool]  # ended with EOS within max_new_tokens
    group_size: int
    reference_completions: list[str] | None = None  # one per completion (its prompt's reference), optional
    aliases: list[list[str]] | None = None  # accepted alternatives to each answer (None: no aliases)

    def references(self) -> list[tuple[str, list[str]]]:
        """(answer, aliases) per completion; a prompt without an answer here is a bug the settings should stop."""
        aliases = self.aliases if self.aliases is not None else [[] for _ in self.answers]
        if any(answer is None for answer in self.answers):
            raise ValueError("a rule reward needs answers, but some prompts have none")
        return list(zip(self.answers, aliases, strict=True))  # type: ignore[arg-type]


RewardFn = Callable[[RewardInputs], torch.Tensor]


@dataclass
class WeightedReward:
    name: str
    weight: float
    fn: RewardFn
    gate: str | None = None  # counts only on completions where the named reward is > 0 (grpo.rewards[].gate)


# ----------------------------------------------------------------------------------------- rule rewards
def _scores(inputs: RewardInputs, kinds: list[str]) -> torch.Tensor:
    refs = inputs.references()
    return torch.tensor(
        [
            score(kind, answer, text, aliases)
            for kind, (answer, aliases), text in zip(kinds, refs, inputs.completions, strict=True)
        ]
    )


def verifier_reward(inputs: RewardInputs) -> torch.Tensor:
    """Each prompt's own verifier (its row's `kind`), a score in [0, 1]."""
    return _scores(inputs, inputs.kinds)


def exact_match_reward(inputs: RewardInputs) -> torch.Tensor:
    """The `exact_match` verifier whatever the prompt's kind (marked answer, SQuAD-normalised, aliases)."""
    return _scores(inputs, ["exact_match"] * len(inputs.completions))


def token_f1_reward(inputs: RewardInputs) -> torch.Tensor:
    """The `token_f1` verifier whatever the prompt's kind (best F1 over the answer and its aliases)."""
    return _scores(inputs, ["token_f1"] * len(inputs.completions))


def make_format_reward(pattern: str | None) -> RewardFn:
    """1.0 when the completion ended with EOS, is non-empty, and (if given) fully matches `pattern`."""
    regex = re.compile(pattern) if pattern else None

    def format_reward(inputs: RewardInputs) -> torch.Tensor:
        scores = []
        for text, done in zip(inputs.completions, inputs.terminated, strict=True):
            ok = done and bool(text.strip()) and (regex is None or regex.fullmatch(text.strip()) is not None)
            scores.append(float(ok))
        return torch.tensor(scores)

    return format_reward


# ----------------------------------------------------------------------------------------- reward models
def _rows(enc: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    return {key: value[index] for key, value in enc.items()}


def group_pair_index(num_completions: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All ordered pairs (i, j), i != j, inside each group, i-major: G-1 opponents per completion."""
    firsts, seconds = [], []
    for start in range(0, num_completions, group_size):
        for i in range(start, start + group_size):
            for j in range(start, start + group_size):
                if i != j:
                    firsts.append(i)
                    seconds.append(j)
    return torch.tensor(firsts, dtype=torch.long), torch.tensor(seconds, dtype=torch.long)


@dataclass
class RiskParts:
    """A risk-averse reward's two terms per completion, in score units before any transform: the posterior-mean
    score and the penalty lambda * sd(s), each averaged over the completion's comparisons (its reward, without
    transform, is score - penalty)."""

    score: torch.Tensor
    penalty: torch.Tensor


class RewardModelReward:
    """Reward from a prefpipe reward model; see the module docstring for the formulas."""

    def __init__(
        self,
        rm,
        *,
        opponent: str,
        risk_aversion: float,
        transform: str,
        batch_size: int,
        risk_measure: str = "sd",
    ) -> None:
        self.measure = _risk_measure(rm, risk_measure, transform)
        if opponent not in ("group", "reference"):
            raise ConfigError(f"opponent must be group or reference, got {opponent!r}")
        if transform not in ("none", "sigmoid"):
            raise ConfigError(f"transform must be none or sigmoid, got {transform!r}")
        if risk_aversion and not rm.bayesian:
            raise ConfigError(
                f"risk_aversion needs a Bayesian reward model (bgpm) or a deep ensemble (a reward_model naming "
                f"an eval.ensembles entry), this one is {rm.head_type!r}"
            )
        self.rm, self.opponent, self.risk_aversion = rm, opponent, float(risk_aversion)
        self.transform, self.batch_size = transform, batch_size
        self.last_risk: RiskParts | None = None  # the last call's score and penalty (risk_aversion > 0 only)

    def _terms(
        self, score: torch.Tensor, var: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(value, penalty) per comparison: the risk measure's; at k = 0 its value alone (penalty None), which is
        the score for `sd` and the predictive probability for `mutual_information` (so k = 0 is its control)."""
        if var is None or not (self.risk_aversion or self.measure.probability_scale):
            return score, None
        value, penalty = self.measure.terms(score, var, float(self.rm.tau), self.risk_aversion)
        return value, penalty if self.risk_aversion else None

    def _keep_risk(self, score: torch.Tensor, penalty: torch.Tensor | None, per: int) -> None:
        """Per completion, the mean over its `per` comparisons of the posterior-mean score and of the penalty,
        kept for the step's diagnostics (grpo/analyses/risk.py): a penalty only moves advantages through its spread
        within a group."""
        self.last_risk = None
        if penalty is not None:
            self.last_risk = RiskParts(
                score.float().view(-1, per).mean(dim=1), penalty.view(-1, per).mean(dim=1)
            )

    def _finish(self, score: torch.Tensor, penalty: torch.Tensor | None) -> torch.Tensor:
        score = score.float().reshape(-1)
        if penalty is not None:
            score = score - penalty
        if self.transform == "sigmoid":
            score = torch.sigmoid(score / self.rm.tau)
        return score

    def __call__(self, inputs: RewardInputs) -> torch.Tensor:
        self.last_risk = None
        enc = self.rm.encode(inputs.prompts, inputs.completions, batch_size=self.batch_size)
        if self.opponent == "reference":
            if inputs.reference_completions is None:
                raise ValueError("reward_model opponent=reference needs reference completions")
            ref = self.rm.encode(inputs.prompts, inputs.reference_completions, batch_size=self.batch_size)
            score, penalty = self._terms(*self.rm.compare(enc, ref))
            self._keep_risk(score.reshape(-1), penalty, 1)
            return self._finish(score, penalty)
        if self.rm.scalar_reward and not self.risk_aversion:
            return self._finish(self.rm.rewards(enc), None)
        if self.rm.scalar_reward:  # a deep ensemble of scalar heads (a single one has no variance: refused)
            score, penalty = self._terms(*self.rm.reward_moments(enc))
            self._keep_risk(score, penalty, 1)
            return self._finish(score, penalty)
        first, second = group_pair_index(len(inputs.completions), inputs.group_size)
        score, penalty = self._terms(*self.rm.compare(_rows(enc, first), _rows(enc, second)))
        self._keep_risk(score.reshape(-1), penalty, inputs.group_size - 1)
        pairwise = self._finish(score, penalty)
        return pairwise.view(-1, inputs.group_size - 1).mean(dim=1)


def _risk_measure(rm, name: str, transform: str):
    """The registered risk measure `name`, checked against the model and the transform."""
    if name not in RISK_MEASURES:
        raise ConfigError(f"risk_measure must be one of {sorted(RISK_MEASURES)}, got {name!r}")
    measure = RISK_MEASURES[name]
    if measure.bayesian_only and getattr(rm, "members", None) is not None:
        raise ConfigError(f"risk_measure {name} reads a Bayesian head's posterior; this is a deep ensemble")
    if measure.probability_scale and transform != "none":
        raise ConfigError(f"risk_measure {name} already pays a probability; transform must be none")
    return measure


# ----------------------------------------------------------------------------------------- registry
RewardFactory = Callable[[dict[str, Any], Any], RewardFn]  # (complete spec, reward model or None) -> function


def _never(spec: dict[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class RewardSource:
    """One `grpo.rewards[].type`: its factory, the spec keys it reads, whether it needs reference completions."""

    factory: RewardFactory
    keys: tuple[str, ...] = ()  # read by the factory, besides COMMON_KEYS
    needs_reference: Callable[[dict[str, Any]], bool] = _never
    needs_answers: bool = False  # reads each prompt's answer (a prompt source without answers cannot feed it)


COMMON_KEYS = ("type", "name", "weight")  # name null = the type
REWARD_SOURCES: dict[str, RewardSource] = {}


def register_reward_source(
    name: str,
    keys: tuple[str, ...] = (),
    needs_reference: Callable[[dict[str, Any]], bool] = _never,
    needs_answers: bool = False,
) -> Callable[[RewardFactory], RewardFactory]:
    """Decorator: `factory(spec, reward_model)` builds the reward function of `type: <name>` specs."""

    def decorate(factory: RewardFactory) -> RewardFactory:
        REWARD_SOURCES[name] = RewardSource(factory, keys, needs_reference, needs_answers)
        return factory

    return decorate


def _rule(fn: RewardFn) -> RewardFactory:
    return lambda spec, reward_model: fn


register_reward_source("verifier", needs_answers=True)(_rule(verifier_reward))
register_reward_source("exact_match", needs_answers=True)(_rule(exact_match_reward))
register_reward_source("token_f1", needs_answers=True)(_rule(token_f1_reward))


@register_reward_source("format", keys=("pattern",))
def _format_source(spec: dict[str, Any], reward_model) -> RewardFn:
    return make_format_reward(spec["pattern"])


@register_reward_source(
    "reward_model",
    keys=("opponent", "risk_aversion", "risk_measure", "transform", "batch_size"),
    needs_reference=lambda spec: spec["opponent"] == "reference",
)
def _reward_model_source(spec: dict[str, Any], reward_model) -> RewardFn:
    if reward_model is None:
        raise ConfigError("needs a reward model, but no --reward-model was given")
    return RewardModelReward(
        reward_model,
        opponent=spec["opponent"],
        risk_aversion=spec["risk_aversion"],
        transform=spec["transform"],
        batch_size=int(spec["batch_size"]),
        risk_measure=spec["risk_measure"],
    )


# ----------------------------------------------------------------------------------------- assembly
def _source(spec: dict[str, Any], key: str) -> RewardSource:
    kind = spec.get("type")
    if kind not in REWARD_SOURCES:
        raise ConfigError(f"{key}.type must be one of {tuple(REWARD_SOURCES)}, got {kind!r}")
    return REWARD_SOURCES[kind]


def _check_complete(spec: dict[str, Any], source: RewardSource, key: str) -> None:
    missing = [k for k in (*COMMON_KEYS, *source.keys) if k not in spec]
    if missing:
        raise ConfigError(
            f"{key} ({spec['type']}) lacks {missing}: reward specs must arrive complete, with the defaults "
            "of workflow/schemas/grpo.schema.yaml ($defs.reward_fn)"
        )


def build_rewards(specs: list[dict], reward_model=None) -> list[WeightedReward]:
    """Turn `grpo.rewards` (a list of complete {type, name, weight, ...} specs) into weighted reward functions."""
    if not specs:
        raise ConfigError("grpo.rewards is empty: GRPO needs at least one reward function")
    built, names = [], set()
    for pos, spec in enumerate(specs):
        key = f"grpo.rewards[{pos}]"
        source = _source(spec, key)
        _check_complete(spec, source, key)
        name = spec["type"] if spec["name"] is None else spec["name"]
        if name in names:
            raise ConfigError(f"{key}.name {name!r} is used twice; give each reward a distinct name")
        names.add(name)
        try:
            fn = source.factory(spec, reward_model)
        except ConfigError as err:
            raise ConfigError(f"{key} ({spec['type']}): {err}") from err
        built.append(WeightedReward(name, float(spec["weight"]), fn, spec.get("gate")))
    _check_gates(built)
    return built


def _check_gates(rewards: list[WeightedReward]) -> None:
    """A gate names another reward that is not itself gated (one level: what pays is always a plain reward)."""
    gated = {r.name: r.gate for r in rewards if r.gate is not None}
    names = [r.name for r in rewards]
    for pos, reward in enumerate(rewards):
        if reward.gate is None:
            continue
        if reward.gate == reward.name or reward.gate not in names:
            others = [n for n in names if n != reward.name]
            raise ConfigError(
                f"grpo.rewards[{pos}].gate {reward.gate!r} must name another reward of the list: {others}"
            )
        if reward.gate in gated:
            raise ConfigError(
                f"grpo.rewards[{pos}].gate {reward.gate!r} is itself gated; a gate must be an ungated reward"
            )


def compute_rewards(
    rewards: list[WeightedReward], inputs: RewardInputs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted total (N,) and each function's raw values; a non-finite value is an error naming the function.

    A gated reward adds its weighted value only where its gate reward is > 0 (for example a reward model that
    ranks the verified answers among themselves and pays nothing where the verifier says wrong); its raw values
    in `parts` stay ungated, so the reward-hacking series reads what the model itself scored."""
    total = torch.zeros(len(inputs.completions))
    parts: dict[str, torch.Tensor] = {}
    for reward in rewards:
        values = reward.fn(inputs).float().reshape(-1).cpu()
        if values.numel() != total.numel():
            raise ValueError(
                f"reward {reward.name!r} returned {values.numel()} values for {total.numel()} completions"
            )
        if not torch.isfinite(values).all():
            bad = int((~torch.isfinite(values)).sum())
            raise ValueError(f"reward {reward.name!r} returned {bad} non-finite values")
        parts[reward.name] = values
    for reward in rewards:
        values = parts[reward.name]
        if reward.gate is not None:
            values = values * (parts[reward.gate] > 0).float()
        total = total + reward.weight * values
    return total, parts


def answer_reward_keys(specs: list[dict]) -> list[str]:
    """`grpo.rewards[i].type` keys of the rewards that read prompts' answers (verifier, exact_match, ...)."""
    return [
        f"grpo.rewards[{pos}].type ({spec['type']})"
        for pos, spec in enumerate(specs)
        if _source(spec, f"grpo.rewards[{pos}]").needs_answers
    ]


def needs_reference_completions(specs: list[dict]) -> bool:
    """Some reward compares against the reference policy's completion (e.g. reward_model opponent=reference)."""
    return any(_source(spec, f"grpo.rewards[{pos}]").needs_reference(spec) for pos, spec in enumerate(specs))
