"""A deep ensemble of reward models used as one (a GRPO run whose `reward_model` names an `eval.ensembles` entry;
docs/findings/RISK_RL.md): the members' mean score is the ensemble's score and the members' sample sd (n - 1, the
`score_sd` of evaluation.uncertainty.ensemble_preference, which eval_ensemble reports) its uncertainty.

It offers the stage-facing API of a RewardModel (encode, compare, rewards, head_type, tau, scalar_reward,
bayesian), so GRPO's reward-model reward and the policy evaluation use it unchanged:

    compare(a, b)   mean_m s_m(a > b | x) and var_m (sample variance over members), s_m a member's own score
                    (a scalar member's r_m(a) - r_m(b), a pairwise member's skew-symmetric s_m(a, b))
    rewards(enc)    mean_m r_m(x, y) (every member scalar, e.g. BT); reward_moments adds var_m r_m

Members are point heads with one tau, as eval_ensemble requires; each keeps its own tokenizer, so an encoding
is every member's own encoding under `<member index>/<key>` (row-aligned tensors, so rows select alike).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from prefpipe.common.config import ConfigError
from prefpipe.reward.network import RewardModel

SEP = "/"
Encoding = dict[str, torch.Tensor]


class EnsembleRewardModel:
    """K >= 2 point-head reward models scored as one: their mean score, their disagreement as Var[s]."""

    def __init__(self, members: Sequence[RewardModel], names: Sequence[str]) -> None:
        if len(members) < 2 or len(members) != len(names):
            raise ConfigError(f"a deep ensemble needs K >= 2 members, one name each (got {list(names)})")
        for name, member in zip(names, members, strict=True):
            if member.bayesian:
                raise ConfigError(f"ensemble member {name} is a Bayesian head (ensembles are of point heads)")
            if member.tau != members[0].tau:
                raise ConfigError(
                    f"ensemble member {name} has tau {member.tau}, {names[0]} has {members[0].tau}"
                )
        self.members, self.names = list(members), list(names)

    @property
    def head_type(self) -> str:
        return "ensemble(" + ", ".join(m.head_type for m in self.members) + ")"

    @property
    def tau(self) -> float:
        return self.members[0].tau

    @property
    def bayesian(self) -> bool:
        """compare() returns Var[s] (the members' disagreement, the members taken as posterior samples as
        ensemble_preference takes them), so risk-averse rewards are possible."""
        return True

    @property
    def scalar_reward(self) -> bool:
        """Every member gives one reward r(x, y) per response (rewards(enc)); else scores are pairwise."""
        return all(m.scalar_reward for m in self.members)

    def encode(self, prompts: list[str], responses: list[str], batch_size: int) -> Encoding:
        """Every member's own encoding of the rows, its keys prefixed by the member's index."""
        out: Encoding = {}
        for i, member in enumerate(self.members):
            enc = member.encode(prompts, responses, batch_size=batch_size)
            out.update({f"{i}{SEP}{key}": value for key, value in enc.items()})
        return out

    def _own(self, enc: Encoding, i: int) -> Encoding:
        head = f"{i}{SEP}"
        return {key[len(head) :]: value for key, value in enc.items() if key.startswith(head)}

    def member_scores(self, enc_a: Encoding, enc_b: Encoding) -> torch.Tensor:
        """(K, N): each member's s_m(a > b | x) per row."""
        scores = [m.compare(self._own(enc_a, i), self._own(enc_b, i))[0] for i, m in enumerate(self.members)]
        return torch.stack([s.float().reshape(-1) for s in scores])

    def compare(self, enc_a: Encoding, enc_b: Encoding) -> tuple[torch.Tensor, torch.Tensor]:
        """The members' mean score per row and its sample variance over members (n - 1)."""
        scores = self.member_scores(enc_a, enc_b)
        return scores.mean(dim=0), scores.var(dim=0, unbiased=True)

    def reward_moments(self, enc: Encoding) -> tuple[torch.Tensor, torch.Tensor]:
        """Scalar members: mean_m r_m(x, y) per row and its sample variance over members (n - 1)."""
        rewards = torch.stack(
            [m.rewards(self._own(enc, i)).float().reshape(-1) for i, m in enumerate(self.members)]
        )
        return rewards.mean(dim=0), rewards.var(dim=0, unbiased=True)

    def rewards(self, enc: Encoding) -> torch.Tensor:
        return self.reward_moments(enc)[0]


def load_reward(
    folders: Sequence[str | os.PathLike], device: str | torch.device, fast_paths: bool | None
) -> RewardModel | EnsembleRewardModel:
    """One reward model folder: that model; several: the deep ensemble of their models (the workflow passes
    the members of the eval.ensembles entry a run's `reward_model` names, in its order)."""
    from prefpipe.reward.model import load_reward_model

    models = [load_reward_model(f, device=device, fast_paths=fast_paths) for f in folders]
    if len(models) == 1:
        return models[0]
    return EnsembleRewardModel(models, [str(f) for f in folders])


def folders_label(folders: Sequence[str] | None) -> str | list[str] | None:
    """How summaries and checkpoint fingerprints name the reward model: one folder as itself (as before
    ensembles), a deep ensemble as the list of its members' folders."""
    if not folders:
        return None
    return str(folders[0]) if len(folders) == 1 else [str(f) for f in folders]
