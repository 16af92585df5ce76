"""Multi-turn episodes on the vLLM engine: vLLM writes the policy turns, the run's environment answers the calls,
and the episode is the plain engine's `Episode` (same segments, limits and `Rollout`), with the engine's own
log-probs of the policy tokens for the importance corrections (engines/correction.py).

A round is one `generate` call for every row that is writing a turn: each request is the row's prompt plus its
episode so far as token ids (a `TokensPrompt`), so vLLM's prefix cache reuses the KV blocks the row's earlier
rounds computed (the engine runs with `enable_prefix_caching`; only the new result tokens and the part of the
last block they share are prefilled). Its tokens go through the same bookkeeping as the plain engine's
(episodes/turns.py): each sampled token is taken one at a time, and the first one at which the tool format's
`turn_end` ends the turn (a call, an answer, EOS) or a limit is reached ends it; any tokens vLLM sampled after
it are dropped. So the episode's tokens are those the plain engine keeps, the closing text of a call included.

Where vLLM stops: at EOS, at `max_tokens` (what is left of the turn's and the episode's budgets) and at every
token whose text holds the last character of one of the format's `closers` (`>` for the tags and Hermes'
</tool_call>). The engine runs without a tokenizer (token ids in and out), so vLLM's stop strings are not
available; stopping at such a token and reading the turn is exact whatever the tokenization, and a row whose
turn goes on (it wrote `<search>`, not a closing tag) joins the next round. The environment's tokens get
log-prob 0 from the engine and never enter a ratio (the ratio mask holds the policy's tokens only).

Seeds: the request of a row's k-th round gets a seed from (the step's seed, the row's index in the whole step,
k), so a row samples the same on any data-parallel process count, as single-turn requests do.
"""

from __future__ import annotations

from prefpipe.grpo.rollout.episodes.episode import POLICY
from prefpipe.grpo.rollout.episodes.generate import Decoded
from prefpipe.grpo.rollout.episodes.turns import (
    DONE,
    EpisodeRow,
    Sampling,
    TurnRules,
    answer_call,
    start_rows,
    take_policy_token,
    turn_room,
)

SEED_STRIDE = 1_000_003


def closing_token_ids(tokenizer, closers: tuple[str, ...]) -> list[int]:
    """Every token id whose text holds the last character of a closer (none for a format that ends at EOS)."""
    chars = {c[-1] for c in closers if c}
    if not chars:
        return []
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False)
    return [i for i, text in enumerate(texts) if any(c in text for c in chars)]


def request_seed(seed: int, row: int, round_: int) -> int:
    """The seed of a row's round: distinct for distinct (row, round) while both stay under SEED_STRIDE."""
    return ((seed * SEED_STRIDE + row) * SEED_STRIDE + round_) % 2**63


class VllmEpisodeDecoder:
    """Episodes of one step's prompts on `llm` (a vLLM LLM holding the policy's weights); `closing_ids`
    (tokenizer, closers) -> the token ids a turn may end at; `seed` and `first_row` (the step's index of this
    process's first row) seed its requests."""

    def __init__(self, llm, eos_ids: list[int], closing_ids, seed: int, first_row: int) -> None:
        self.llm, self.eos_ids, self.closing_ids = llm, list(eos_ids), closing_ids
        self.seed, self.first_row = seed, first_row
        self.stop_ids: list[int] = []
        self.rounds: list[int] = []  # per row of the last call: its generate requests (turns + resumed turns)

    def _params(self, row: int, round_: int, max_tokens: int, sampling: Sampling):
        from vllm import SamplingParams

        greedy = sampling.uniforms is None
        return SamplingParams(
            n=1,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy else sampling.top_k,  # 0 = off in both
            max_tokens=max_tokens,
            logprobs=0,  # the sampled token's log-prob
            stop_token_ids=self.stop_ids,
            detokenize=False,
            seed=request_seed(self.seed, self.first_row + row, round_),
        )

    def __call__(self, tokenizer, batch, runners, rows, fmt, limits, sampling: Sampling) -> Decoded:
        group = len(runners) // batch.input_ids.shape[0]
        prompts = [
            ids[mask.bool()].tolist() for ids, mask in zip(batch.input_ids, batch.attention_mask, strict=True)
        ]
        live = start_rows(runners, list(rows), group)
        rules = TurnRules(fmt, tokenizer, frozenset(self.eos_ids), limits)
        self.stop_ids = sorted(set(self.eos_ids) | set(self.closing_ids(tokenizer, fmt.closers())))
        logps: list[list[float]] = [[] for _ in live]
        rounds = [0] * len(live)
        while any(r.state != DONE for r in live):
            writing = [i for i, r in enumerate(live) if r.state == POLICY]
            if writing:
                requests = [{"prompt_token_ids": prompts[i // group] + live[i].episode.ids} for i in writing]
                params = [self._params(i, rounds[i], turn_room(live[i], limits), sampling) for i in writing]
                outputs = self.llm.generate(requests, params, use_tqdm=False)
                for i, out in zip(writing, outputs, strict=True):
                    _take(live[i], logps[i], out.outputs[0], rules, i)
                    rounds[i] += 1
            for i, row in enumerate(live):
                logps[i] += [0.0] * len(answer_call(row, rules))
        self.rounds = rounds
        return [r.episode for r in live], logps


def _take(row: EpisodeRow, logps: list[float], sample, rules: TurnRules, index: int) -> None:
    """The sampled tokens into the row's episode, one at a time, up to the first that ends the turn."""
    tokens = list(sample.token_ids)
    if not tokens:
        raise RuntimeError(
            f"the vLLM engine returned no token for episode row {index} (finish: {sample.finish_reason})"
        )
    for j, token in enumerate(tokens):
        take_policy_token(row, token, rules)
        logps.append(float(sample.logprobs[j][token].logprob))
        if row.state != POLICY:
            return
