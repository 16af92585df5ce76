"""An episode as one token sequence with owned segments, and a batch of episodes as the trainer's `Rollout`.

The sequence is the prompt, then policy turn 1, environment turn 1, policy turn 2, ... Every token after the
prompt belongs to exactly one segment, owned by the policy (what it sampled) or the environment (what the
environment's result added, tool-format wrapper included). In the `Rollout` the whole episode after the prompt
is the "completion"; its `env_mask` is 1 on policy tokens and 0 on environment tokens, so the loss mask
(completion mask * env mask, grpo/rollout/completions.py) leaves the environment's tokens out of the loss and
out of the KL. `mask_mode: with_environment` (grpo/algorithm/spans.py) is the deliberate wrong mask (H02).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from prefpipe.generation.tokens import PromptBatch
from prefpipe.grpo.environments.base import Observation, ToolCall
from prefpipe.grpo.rollout.completions import Rollout

POLICY, ENVIRONMENT = "policy", "environment"
# how an episode ended
ANSWERED, NO_CALL, TURN_LIMIT, TOKEN_LIMIT = "answer", "no_call", "turn_limit", "token_limit"


@dataclass(frozen=True)
class Segment:
    owner: str  # policy | environment
    turn: int  # 0-based: policy turn k is answered by environment turn k
    start: int  # token offsets after the prompt, [start, end)
    end: int


@dataclass
class Episode:
    ids: list[int] = field(default_factory=list)  # every token after the prompt
    segments: list[Segment] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    answer: str | None = None
    finish: str | None = None  # answer | no_call | turn_limit | token_limit; None while running
    context_cut: int = 0  # result tokens dropped because the episode's token budget ran out (H04)

    def add(self, owner: str, ids: list[int]) -> None:
        """Append tokens to the last segment when it has this owner, else open the next one."""
        if not ids:
            return
        last = self.segments[-1] if self.segments else None
        if last is not None and last.owner == owner:
            self.segments[-1] = Segment(owner, last.turn, last.start, last.end + len(ids))
        else:
            turn = 0 if last is None else last.turn + (owner == POLICY)
            self.segments.append(Segment(owner, turn, len(self.ids), len(self.ids) + len(ids)))
        self.ids.extend(ids)

    @property
    def owners(self) -> list[str]:
        out: list[str] = []
        for seg in self.segments:
            out += [seg.owner] * (seg.end - seg.start)
        return out

    @property
    def turns(self) -> int:
        return sum(1 for s in self.segments if s.owner == POLICY)

    @property
    def truncated(self) -> bool:
        return self.finish == TOKEN_LIMIT


def episode_rollout(
    tokenizer, batch: PromptBatch, group_size: int, episodes: list[Episode], pad_id: int, device
) -> Rollout:
    """The trainer's `Rollout` of prompt-major episodes (rows p*G .. p*G+G-1 continue prompt p): completion =
    the episode after the prompt, right padded; env_mask 0 on environment tokens; texts = the whole episode."""
    n, width = len(episodes), max([len(e.ids) for e in episodes] + [1])
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    env = torch.zeros((n, width), dtype=torch.long)
    for row, ep in enumerate(episodes):
        k = len(ep.ids)
        ids[row, :k] = torch.tensor(ep.ids, dtype=torch.long)
        mask[row, :k] = 1
        env[row, :k] = torch.tensor([o == POLICY for o in ep.owners], dtype=torch.long)
    return Rollout(
        prompt_ids=batch.input_ids.repeat_interleave(group_size, dim=0).to(device),
        prompt_mask=batch.attention_mask.repeat_interleave(group_size, dim=0).to(device),
        completion_ids=ids.to(device),
        completion_mask=mask.to(device),
        env_mask=env.to(device),
        truncated=torch.tensor([e.truncated for e in episodes], dtype=torch.bool),
        prompt_truncated=batch.truncated.repeat_interleave(group_size),
        texts=[tokenizer.decode(e.ids, skip_special_tokens=True) for e in episodes],
    )
