"""RewardModel: backbone + head + tokenizer; forward() feeds training, encode()/compare() are what evaluation and
GRPO call. Built, saved and loaded by prefpipe.reward.model.

The optimised paths it may take (prefpipe.reward.fast: the last layer at the read positions only, the lean
Llama scoring forward, shared prompts, batched backend tokenisation, mask-free equal-length batches) are all
switched by `set_fast_paths` (the run-wide `fast_paths` setting); each gives its plain path's numbers to float
tolerance.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from prefpipe.common.chat import conversation_key
from prefpipe.common.progress import progress
from prefpipe.reward import backbone as bb
from prefpipe.reward import likelihood
from prefpipe.reward.batching import Batch, plan_batches
from prefpipe.reward.collate import PairEncoder, TokenizedRow
from prefpipe.reward.fast.lean_encode import final_states_at, lean_core
from prefpipe.reward.fast.packed import packed_features
from prefpipe.reward.fast.selected_last_layer import causal_allowed, last_layer, selected_last_layer
from prefpipe.reward.heads.base import RewardHead
from prefpipe.reward.pooling import (
    first_token_index,
    gather_positions,
    last_token_index,
    mean_pool,
    pool,
    response_mask,
)
from prefpipe.reward.spec import ModelSpec

log = logging.getLogger(__name__)

# Poolings that read one position per row: the last layer can run at that position (and the prompt's) alone.
POINT_POOLING = {"last": last_token_index, "first": first_token_index}


class RewardModel(nn.Module):
    """Backbone + reward head. forward() feeds training; encode()/compare() are the stage-facing API."""

    def __init__(
        self,
        backbone: nn.Module,
        head: RewardHead,
        tokenizer: Any,
        spec: ModelSpec,
        likelihood_model: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if spec.likelihood_features and likelihood_model is None:
            raise ValueError("RewardModel: likelihood_features needs the frozen likelihood model")
        self.backbone = backbone
        self.likelihood_model = likelihood.freeze(likelihood_model) if likelihood_model is not None else None
        self.head = head
        self.tokenizer = tokenizer
        self.spec = spec
        self.encoder = PairEncoder(tokenizer, spec.max_length, spec.padding_side, spec.keep_response)
        self._uses_position_ids = bb.accepts_position_ids(backbone)
        self._no_cache = spec.backbone_kind == "decoder"
        # Other heads (same spec) that encode_dataset also applies to each batch's backbone features; their
        # encodings come back as "<name>/<key>". Evaluation sets it (e.g. the head as fine-tuned).
        self.extra_heads: dict[str, RewardHead] = {}
        # set_fast_paths sets these (the equivalence tests flip one at a time). Scoring batches of distinct
        # rows, length-bucketed, mask-free when of equal length (else consecutive rows padded, with a mask).
        self.fast_paths = True
        # features() runs the last decoder layer at the read positions only (same scores, less work).
        self.selected_last_layer = last_layer(backbone) is not None
        # Whether encode_dataset (scoring, no gradient) runs Llama backbones through lean_encode's fused
        # forward (same scores to float tolerance, faster on small models; False: transformers' forward).
        self.lean_scoring = True

    def set_fast_paths(self, enabled: bool) -> RewardModel:
        """The run-wide switch (setting `fast_paths`). False sends every reward fast path to its plain path:
        the last layer at every position (not `selected_last_layer`, hence no shared prompts in training),
        transformers' forward in scoring (not `lean_encode`), per-row tokenisation (not the batched backend
        call) and scoring batches of consecutive rows padded with their mask (not length-bucketed, mask-free
        batches of distinct rows). Same numbers to float tolerance either way (tests/test_reward_fast_switch.py)."""
        self.fast_paths = enabled
        self.selected_last_layer = enabled and last_layer(self.backbone) is not None
        self.lean_scoring = enabled
        self.encoder.fast_tokenize = enabled
        return self

    def train(self, mode: bool = True) -> RewardModel:
        """Train mode everywhere except the frozen likelihood model, which always reads in eval mode."""
        super().train(mode)
        if self.likelihood_model is not None:
            self.likelihood_model.eval()
        return self

    @property
    def config(self) -> Any:
        """The backbone's HF config (accelerate reads hidden_size from it for DeepSpeed 'auto' values)."""
        return self.backbone.config

    @property
    def head_type(self) -> str:
        return self.spec.head.type

    @property
    def tau(self) -> float:
        return float(self.spec.head.tau)

    @property
    def bayesian(self) -> bool:
        """The head has a posterior: compare() returns Var[s] and risk-averse rewards are possible."""
        return self.head.bayesian

    @property
    def scalar_reward(self) -> bool:
        """The head gives one reward r(x, y) per response: rewards(enc)."""
        return self.head.scalar_reward

    def features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        prompt_index: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        likelihood_stats: torch.Tensor | None = None,
        lean: nn.Module | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's raw inputs: response features (N, head_input_size), before standardisation, and the
        prompt's last state (N, H). With embedding_features the response features go on with the mean of the
        response tokens' input embeddings, which carries the reply's content independently of its wording; with
        likelihood_features they end with the mean and minimum log-prob of the response tokens under the frozen
        starting backbone's tied LM head (`prefpipe.reward.likelihood`): `likelihood_stats` (N, WIDTH) when the rows'
        summaries were cached (training), else computed here. attention_mask None means no padding: the
        backbone gets no mask (SDPA's causal fast path). `lean` (inference only): the Llama core that
        lean_encode runs instead of the transformers forward (`_lean_core`)."""
        kwargs = self._backbone_kwargs(position_ids)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        index = self._read_positions(mask, prompt_index)
        if index is not None:  # the last layer runs at the pooled and the prompt positions only
            allowed = causal_allowed(index, attention_mask, input_ids.shape[1])
            if lean is not None:
                positions = kwargs.get("position_ids")
                states = final_states_at(lean, input_ids, attention_mask, positions, index, allowed)
            else:
                with selected_last_layer(self.backbone, index, allowed):
                    out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
                states = out.last_hidden_state
            pooled, h_prompt = states.unbind(dim=1)
        else:
            hidden = self.backbone(
                input_ids=input_ids, attention_mask=attention_mask, **kwargs
            ).last_hidden_state
            pooled = pool(hidden, mask, self.spec.pooling, prompt_index)
            h_prompt = gather_positions(hidden, prompt_index)
        attention_mask = mask
        if self.spec.embedding_features:
            embedded = self.backbone.get_input_embeddings()(input_ids)
            words = mean_pool(embedded, response_mask(attention_mask, prompt_index))
            pooled = torch.cat([pooled, words.to(pooled.dtype)], dim=-1)
        if self.spec.likelihood_features:
            stats = likelihood_stats
            if stats is None:
                stats = likelihood.response_stats(
                    self.likelihood_model, input_ids, attention_mask, prompt_index, kwargs
                )
            pooled = torch.cat([pooled, stats.to(pooled.device, pooled.dtype)], dim=-1)
        return pooled, h_prompt

    def _backbone_kwargs(self, position_ids: torch.Tensor | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if position_ids is not None and self._uses_position_ids:
            kwargs["position_ids"] = position_ids
        if self._no_cache:
            kwargs["use_cache"] = False
        return kwargs

    @torch.no_grad()
    def cache_likelihood(self, rows: list[TokenizedRow], batch_size: int, show_progress: bool = True) -> None:
        """Set each row's likelihood summary once (likelihood_features; nothing otherwise): the frozen model
        gives the same summary at every step, so training steps, the shared-prompt form and the head fits read
        it instead of running the frozen model on every micro-batch. Rows go sorted by length in batches of
        `batch_size`; a row's summary depends on the row alone up to float rounding (its padded width moves the
        last bits), and the cache fixes one value per row. `show_progress`: a bar in the log (the main process's)."""
        if not self.spec.likelihood_features:
            return
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
        starts = range(0, len(order), batch_size)
        for start in progress(starts, len(starts), "likelihood features", enabled=show_progress):
            chunk = [rows[i] for i in order[start : start + batch_size]]
            batch = {k: v.to(self.device) for k, v in self.encoder.pad(chunk).items()}
            stats = likelihood.response_stats(
                self.likelihood_model,
                batch["input_ids"],
                batch["attention_mask"],
                batch["prompt_index"],
                self._backbone_kwargs(batch["position_ids"]),
            )
            for row, values in zip(chunk, stats.float().cpu().tolist(), strict=True):
                row.likelihood = tuple(values)

    def _read_positions(
        self, attention_mask: torch.Tensor, prompt_index: torch.Tensor
    ) -> torch.Tensor | None:
        """(N, 2) positions [pooled token, prompt's last token] when the head reads only those and the last
        layer may run there alone (`selected_last_layer`); None for the plain path."""
        if not self.selected_last_layer or self.spec.pooling not in POINT_POOLING:
            return None
        return torch.stack([POINT_POOLING[self.spec.pooling](attention_mask), prompt_index], dim=1)

    def _lean_core(self) -> nn.Module | None:
        """The Llama core for lean_encode when scoring may use it (the head reads point positions and the
        last layer runs at those alone), else None."""
        if not (self.lean_scoring and self.selected_last_layer) or self.spec.pooling not in POINT_POOLING:
            return None
        return lean_core(self.backbone)

    def score_features(
        self, pooled: torch.Tensor, h_prompt: torch.Tensor, head: RewardHead | None = None
    ) -> dict[str, torch.Tensor]:
        """The head (or another `head` of the same spec) on raw features: standardised (head.standardize),
        outside autocast in the head's own dtype (fp32, except under DeepSpeed bf16, which casts every
        parameter to bf16); float32 outputs."""
        head = self.head if head is None else head
        dtype = next(head.parameters()).dtype
        with torch.autocast(device_type=pooled.device.type, enabled=False):
            out = head.encode_features(head.standardize(pooled.to(dtype)), h_prompt.to(dtype))
        return {k: v.float() for k, v in out.items()}

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        prompt_index: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        buckets: list[dict[str, torch.Tensor]] | None = None,
        inverse: torch.Tensor | None = None,
        shared: list[dict[str, torch.Tensor]] | None = None,
        likelihood_stats: torch.Tensor | None = None,
        packed: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """One padded batch, length buckets (PairEncoder.pad_buckets), pairs behind their prompt (shared_prompt:
        chosen rows, then rejected ones) or rows packed (packed.pack_rows): features in row order, then the
        head once on all rows. Inside forward: DDP and DeepSpeed see one forward per micro-batch."""
        if packed is not None:
            return self.score_features(*packed_features(self, packed))
        if shared is not None:
            parts = [self.shared_features(chunk) for chunk in shared]
            side = [torch.cat([part[j] for part in parts])[inverse] for j in range(4)]
            return self.score_features(torch.cat(side[:2]), torch.cat(side[2:]))
        if buckets is None:
            return self.score_features(
                *self.features(input_ids, attention_mask, prompt_index, position_ids, likelihood_stats)
            )
        parts = [self.features(**b) for b in buckets]
        pooled = torch.cat([p for p, _ in parts])[inverse]
        return self.score_features(pooled, torch.cat([h for _, h in parts])[inverse])

    @property
    def shares_prompts(self) -> bool:
        """Whether training may use the shared-prompt form (shared_prompt.py says when it applies)."""
        return self.selected_last_layer and self.spec.pooling == "last"

    def shared_features(self, chunk: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Raw head inputs of k pairs in the shared form (shared_prompt.pack_chunk): chosen and rejected
        features (k, F) and their prompt's last states (k, H), what features() gives for the two padded rows."""
        ids, mask, read = chunk["input_ids"], chunk["attention_mask"], chunk["read"]
        rows = torch.arange(ids.shape[0], device=ids.device)[:, None]
        kwargs: dict[str, Any] = {"position_ids": chunk["position_ids"], "use_cache": False}
        with selected_last_layer(self.backbone, read, mask[:, 0][rows, read]):
            states = self.backbone(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
        chosen, rejected, prompt_chosen, prompt_rejected = states.unbind(dim=1)
        if self.spec.embedding_features:
            embedded = self.backbone.get_input_embeddings()(ids)
            words = [mean_pool(embedded, chunk["response"][:, j]).to(chosen.dtype) for j in (0, 1)]
            chosen, rejected = torch.cat([chosen, words[0]], dim=-1), torch.cat([rejected, words[1]], dim=-1)
        if self.spec.likelihood_features:  # cached per row: the shared form cannot score the responses
            if "likelihood_stats" not in chunk:
                raise ValueError("the shared-prompt form needs the rows' cached likelihood summaries")
            stats = chunk["likelihood_stats"].to(chosen.dtype)
            chosen, rejected = (
                torch.cat([chosen, stats[:, 0]], dim=-1),
                torch.cat([rejected, stats[:, 1]], dim=-1),
            )
        return chosen, rejected, prompt_chosen, prompt_rejected

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode(self, prompts: list[str], responses: list[str], batch_size: int) -> dict[str, torch.Tensor]:
        """Encode rows (prompts[i], responses[i]) in eval mode; float32 CPU tensors, batch-size independent."""
        return self.encode_dataset(prompts, responses, batch_size)[0]

    @torch.inference_mode()
    def encode_dataset(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        batch_size: int,
        progress_label: str | None = None,
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Encode a whole dataset at once; returns the encodings (row order) and the number of forward passes.

        On the fast paths each distinct (prompt, response) is encoded once; all rows are tokenised in one
        batched call; batches are length-bucketed (prefpipe.reward.batching): a batch of equal lengths runs
        without an attention mask, the others pad to their longest row; a Llama backbone runs through
        lean_encode's fused forward. Outputs stay on the model's device until the end (no host sync per batch).
        Truncations are counted per row, duplicates included, as tokenize() would. Each of `extra_heads` is
        applied to the same features; its encodings are returned as "<name>/<key>". With `progress_label` (an
        evaluation's scoring, not a GRPO step's), the batches show progress in the log (prefpipe.common.progress)."""
        if self.training:
            raise RuntimeError("RewardModel.encode needs eval mode (call .eval()); train mode samples")
        heads = {"": self.head} | {f"{name}/": head.eval() for name, head in self.extra_heads.items()}
        keys = [prefix + k for prefix, head in heads.items() for k in head.encoding_keys]
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if not prompts:
            return {k: torch.empty(0) for k in keys}, 0
        rows, where = self._rows_to_encode(prompts, responses)
        lean = self._lean_core()
        parts: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
        order: list[int] = []
        batches = self._scoring_batches(rows, batch_size)
        for batch in progress(
            batches, len(batches), progress_label or "", enabled=progress_label is not None
        ):
            pooled, h_prompt = self.features(
                **self._batch_inputs([rows[i] for i in batch.rows], batch), lean=lean
            )
            for prefix, head in heads.items():
                out = self.score_features(pooled, h_prompt, head)
                for k in head.encoding_keys:
                    parts[prefix + k].append(out[k])
            order += batch.rows
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        index = inverse[torch.tensor(where, dtype=torch.long)].to(self.device)
        return {k: torch.cat(v).index_select(0, index).cpu() for k, v in parts.items()}, len(batches)

    def _rows_to_encode(
        self, prompts: Sequence[str], responses: Sequence[str]
    ) -> tuple[list[TokenizedRow], list[int]]:
        """The tokenised rows to encode and, per input row, its index among them: each distinct pair once on
        the fast paths (truncations still counted per input row), every row on the plain path."""
        if not self.fast_paths:
            return self.encoder.tokenize_batch(list(prompts), list(responses)), list(range(len(prompts)))
        distinct: dict[tuple[Any, str], int] = {}  # (conversation_key, response) -> index among the rows
        where, unique = [], []
        for pair in zip(prompts, responses, strict=True):
            key = (conversation_key(pair[0]), pair[1])
            if key not in distinct:
                distinct[key] = len(unique)
                unique.append(pair)
            where.append(distinct[key])
        rows = self.encoder.tokenize_batch([p for p, _ in unique], [r for _, r in unique])
        copies = Counter(where)  # tokenize_batch counted each distinct cut row once
        for i, row in enumerate(rows):
            if row.cut and copies[i] > 1:
                self.encoder.truncated[row.cut] += copies[i] - 1
        return rows, where

    def _scoring_batches(self, rows: list[TokenizedRow], batch_size: int) -> list[Batch]:
        """Length-bucketed batches on the fast paths; consecutive rows, all padded, on the plain path."""
        if self.fast_paths:
            return plan_batches([len(r.input_ids) for r in rows], batch_size)
        ends = range(0, len(rows), batch_size)
        return [Batch(list(range(a, min(a + batch_size, len(rows)))), uniform=False) for a in ends]

    def _batch_inputs(self, chosen: list[TokenizedRow], batch: Batch) -> dict[str, torch.Tensor | None]:
        """features() inputs of one scoring batch on the model's device: no mask for equal lengths."""
        if batch.uniform:
            inputs: dict[str, torch.Tensor | None] = {
                "input_ids": torch.tensor([r.input_ids for r in chosen], dtype=torch.long),
                "attention_mask": None,
                "prompt_index": torch.tensor([r.prompt_len - 1 for r in chosen], dtype=torch.long),
            }
        else:
            inputs = dict(self.encoder.pad(chosen))
            # right padding: positions are 0, 1, ... already, so no position_ids to pass
            if self.encoder.padding_side == "right":
                inputs.pop("position_ids")
        device = self.device
        return {k: None if v is None else v.to(device) for k, v in inputs.items()}

    def compare(self, enc_a: dict[str, torch.Tensor], enc_b: dict[str, torch.Tensor]):
        """s(a > b | x) per row and its variance (Bayesian heads, closed form) or None."""
        return self.head.compare(enc_a, enc_b)

    def preference_prob(self, enc_a: dict, enc_b: dict) -> torch.Tensor:
        """P(a > b): sigmoid(s / tau) for point heads; E[sigmoid(s / tau)], s ~ N(score, Var[s]), for Bayesian
        heads (integrated as the evaluation integrates it)."""
        return self.head.preference_prob(enc_a, enc_b)

    def rewards(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar reward r(x, y) per encoded row (heads with scalar_reward only, e.g. BT)."""
        return self.head.rewards(enc)
