"""RewardModel (backbone + head + tokenizer), its saved folder, and the one loader evaluation and GRPO use.

Saved folder (<out>/model/): the backbone via save_pretrained (safetensors) or a LoRA adapter plus a
reference to its base, the tokenizer, head.safetensors and head_config.json (head type, dims, tau, pooling,
options, chat formatting, max_length). See docs/CONTRACTS.md. When the trainer refitted the head after
fine-tuning (train.head_fit.after_steps), head_finetuned.safetensors keeps the head as fine-tuned, before the
refit, so evaluation can score both on one backbone pass (`extra_heads`).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from prefpipe.common.chat import has_chat_template
from prefpipe.common.io import atomic_dir, atomic_write_json, read_json
from prefpipe.common.model_errors import model_load
from prefpipe.reward import backbone as bb
from prefpipe.reward import likelihood
from prefpipe.reward.batching import plan_batches
from prefpipe.reward.collate import PairEncoder, TokenizedRow
from prefpipe.reward.heads import RewardHead, build_head, check_head_settings
from prefpipe.reward.lean_encode import final_states_at, lean_core
from prefpipe.reward.pooling import (
    first_token_index,
    gather_positions,
    last_token_index,
    mean_pool,
    pool,
    response_mask,
)
from prefpipe.reward.selected_last_layer import causal_allowed, last_layer, selected_last_layer
from prefpipe.settings.reward import BayesSettings, HeadSettings, RewardSettings

log = logging.getLogger(__name__)

HEAD_CONFIG = "head_config.json"
HEAD_WEIGHTS = "head.safetensors"
# The head as fine-tuned, before the head refit (evaluation scores it as an extra head).
FINETUNED_HEAD_WEIGHTS = "head_finetuned.safetensors"
FORMAT_VERSION = 1
# Poolings that read one position per row: the last layer can run at that position (and the prompt's) alone.
POINT_POOLING = {"last": last_token_index, "first": first_token_index}


@dataclass
class ModelSpec:
    """Everything besides weights needed to rebuild and use a reward model (= head_config.json)."""

    head: HeadSettings
    hidden_size: int
    backbone_kind: str
    pooling: str
    max_length: int
    padding_side: str
    pad_token_fix: str | None
    trust_remote_code: bool
    backbone_format: str = "full"  # full | lora
    base_model: str | None = None  # LoRA: the base the adapter belongs to (as given)
    base_model_relpath: str | None = None  # LoRA: the base relative to the model folder, when local
    # Folders saved before backbone.embedding_features: the head reads the pooled state only.
    embedding_features: bool = False  # head input = [pooled state ; response-token mean of input embeddings]
    # Folders saved before backbone.likelihood_features: no log-likelihood summary.
    likelihood_features: bool = False  # head input also ends with [mean ; min response-token log-prob]

    @property
    def head_input_size(self) -> int:
        """Width of the head's response input (saved in head_config.json beside hidden_size)."""
        width = self.hidden_size * (2 if self.embedding_features else 1)
        return width + (likelihood.WIDTH if self.likelihood_features else 0)

    def to_json(self, tokenizer: Any) -> dict[str, Any]:
        data = asdict(self)
        data["format_version"] = FORMAT_VERSION
        data["head_input_size"] = self.head_input_size
        data["head_type"] = self.head.type  # tau is stored once, under head (older folders also had it here)
        data["chat"] = {
            "formatter": "prefpipe.common.chat.format_pair",
            "chat_template": has_chat_template(tokenizer),
        }
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelSpec:
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{HEAD_CONFIG}: format_version {data.get('format_version')!r}, expected {FORMAT_VERSION}"
            )
        head = dict(data["head"])
        head.setdefault("standardize", False)  # folders saved before head.standardize
        bayes = head.pop("bayes", None)
        if bayes is not None:
            bayes["logvar_clamp"] = tuple(bayes["logvar_clamp"])
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k != "head" and k in data}
        spec = cls(head=HeadSettings(**head, bayes=BayesSettings(**bayes) if bayes else None), **fields)
        if data.get("head_input_size", spec.head_input_size) != spec.head_input_size:
            raise ValueError(
                f"{HEAD_CONFIG}: head_input_size {data['head_input_size']} does not match hidden_size "
                f"{spec.hidden_size} with embedding_features {spec.embedding_features} and "
                f"likelihood_features {spec.likelihood_features}"
            )
        return spec


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
        self.encoder = PairEncoder(tokenizer, spec.max_length, spec.padding_side)
        self._uses_position_ids = bb.accepts_position_ids(backbone)
        self._no_cache = spec.backbone_kind == "decoder"
        # Other heads (same spec) that encode_dataset also applies to each batch's backbone features; their
        # encodings come back as "<name>/<key>". Evaluation sets it (e.g. the head as fine-tuned).
        self.extra_heads: dict[str, RewardHead] = {}
        # Whether features() runs the last decoder layer at the read positions only (same scores, less work;
        # set False to force the plain path, as the equivalence tests do).
        self.selected_last_layer = last_layer(backbone) is not None
        # Whether encode_dataset (scoring, no gradient) runs Llama backbones through lean_encode's fused
        # forward (same scores to float tolerance, faster on small models; False forces transformers' forward).
        self.lean_scoring = True

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
    def cache_likelihood(self, rows: list[TokenizedRow], batch_size: int) -> None:
        """Set each row's likelihood summary once (likelihood_features; nothing otherwise): the frozen model
        gives the same summary at every step, so training steps, the shared-prompt form and the head fits read
        it instead of running the frozen model on every micro-batch. Rows go sorted by length in batches of
        `batch_size`; a row's summary depends on the row alone up to float rounding (its padded width moves the
        last bits), and the cache fixes one value per row."""
        if not self.spec.likelihood_features:
            return
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
        for start in range(0, len(order), batch_size):
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
            out = head(head.standardize(pooled.to(dtype)), h_prompt.to(dtype))
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
    ) -> dict[str, torch.Tensor]:
        """One padded batch, length buckets (PairEncoder.pad_buckets) or pairs behind one copy of their prompt
        (shared_prompt.pack_pairs; outputs: the chosen rows, then the rejected ones): one backbone pass per
        bucket or chunk, the features put back in row order, then the head once on all rows. Inside forward,
        so DDP and DeepSpeed see a single forward per micro-batch."""
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
        self, prompts: Sequence[str], responses: Sequence[str], batch_size: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Encode a whole dataset at once; returns the encodings (row order) and the number of forward passes.

        Each distinct (prompt, response) is encoded once; all rows are tokenised in one batched call; batches
        are length-bucketed (prefpipe.reward.batching): a batch of equal lengths runs without an attention mask,
        the others pad to their longest row; a Llama backbone runs through lean_encode's fused forward. Outputs
        stay on the model's device until the end (no host sync per batch). Truncations are counted per row,
        duplicates included, as tokenize() would. Each of `extra_heads` is applied to the same features; its
        encodings are returned as "<name>/<key>"."""
        if self.training:
            raise RuntimeError("RewardModel.encode needs eval mode (call .eval()); train mode samples")
        heads = {"": self.head} | {f"{name}/": head.eval() for name, head in self.extra_heads.items()}
        keys = [prefix + k for prefix, head in heads.items() for k in head.encoding_keys]
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if not prompts:
            return {k: torch.empty(0) for k in keys}, 0
        distinct: dict[tuple[str, str], int] = {}
        where = [distinct.setdefault(pair, len(distinct)) for pair in zip(prompts, responses, strict=True)]
        unique = list(distinct)
        rows = self.encoder.tokenize_batch([p for p, _ in unique], [r for _, r in unique])
        copies = Counter(where)  # tokenize_batch counted each distinct cut row once
        for i, row in enumerate(rows):
            if row.cut and copies[i] > 1:
                self.encoder.truncated[row.cut] += copies[i] - 1
        device = self.device
        lean = self._lean_core()
        parts: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
        order: list[int] = []
        batches = plan_batches([len(r.input_ids) for r in rows], batch_size)
        for number, batch in enumerate(batches, start=1):
            chosen = [rows[i] for i in batch.rows]
            if batch.uniform:
                inputs = {
                    "input_ids": torch.tensor([r.input_ids for r in chosen], dtype=torch.long),
                    "attention_mask": None,
                    "prompt_index": torch.tensor([r.prompt_len - 1 for r in chosen], dtype=torch.long),
                }
            else:
                inputs = self.encoder.pad(chosen)
                # right padding: positions are 0, 1, ... already, so no position_ids to pass
                if self.encoder.padding_side == "right":
                    inputs.pop("position_ids")
            pooled, h_prompt = self.features(
                **{k: None if v is None else v.to(device) for k, v in inputs.items()}, lean=lean
            )
            for prefix, head in heads.items():
                out = self.score_features(pooled, h_prompt, head)
                for k in head.encoding_keys:
                    parts[prefix + k].append(out[k])
            order += batch.rows
            if number % 50 == 0:
                log.info("encoded %d / %d batches", number, len(batches))
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        index = inverse[torch.tensor(where, dtype=torch.long)].to(device)
        return {k: torch.cat(v).index_select(0, index).cpu() for k, v in parts.items()}, len(batches)

    def compare(self, enc_a: dict[str, torch.Tensor], enc_b: dict[str, torch.Tensor]):
        """s(a > b | x) per row and its variance (Bayesian heads, closed form) or None."""
        return self.head.compare(enc_a, enc_b)

    def preference_prob(
        self, enc_a: dict, enc_b: dict, n_samples: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """P(a > b): sigmoid(s / tau) for point heads; Monte Carlo over the posterior for Bayesian heads."""
        return self.head.preference_prob(enc_a, enc_b, n_samples, generator)

    def rewards(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar reward r(x, y) per encoded row (heads with scalar_reward only, e.g. BT)."""
        return self.head.rewards(enc)


def build_reward_model(base: str, settings: RewardSettings) -> RewardModel:
    """Fresh reward model for training: backbone (+ LoRA) from `base` (backbone.model resolved: the base
    model's folder, another folder or a hub id), new head, fixed tokenizer. The head settings are checked
    first (a stage started by hand gets the registry's check before anything loads)."""
    check_head_settings(settings.head)
    bb.offline_hint()
    s = settings.backbone
    config = bb.load_config(base, s.trust_remote_code)
    width = bb.check_usable(str(base), config, s.trust_remote_code)
    kind = bb.backbone_kind(config, s.kind)
    with_likelihood = likelihood.enabled(
        s.likelihood_features, str(base), config, kind, settings.lora.enabled
    )
    tokenizer, pad_fix = bb.load_tokenizer(base, kind, s)
    max_length = settings.data.max_length
    limit = bb.max_positions(config)
    if limit is not None and max_length > limit:
        log.warning(
            "data.max_length %d > backbone max_position_embeddings %d: using %d", max_length, limit, limit
        )
        max_length = limit
    backbone = bb.load_backbone(base, s)
    if settings.lora.enabled:
        backbone = bb.apply_lora(backbone, settings.lora)
    if s.gradient_checkpointing:
        bb.enable_gradient_checkpointing(backbone)
    spec = ModelSpec(
        head=settings.head,
        hidden_size=width,
        backbone_kind=kind,
        pooling=bb.default_pooling(kind, s.pooling),
        max_length=max_length,
        padding_side=settings.data.padding_side,
        pad_token_fix=pad_fix,
        trust_remote_code=s.trust_remote_code,
        backbone_format="lora" if settings.lora.enabled else "full",
        base_model=str(base) if settings.lora.enabled else None,
        embedding_features=s.embedding_features,
        likelihood_features=with_likelihood,
    )
    head = build_head(settings.head, spec.head_input_size, spec.hidden_size)
    scorer = bb.load_backbone(base, s) if with_likelihood else None
    log.info(
        "reward model: %s head on a %s backbone (%s pooling%s, hidden %d, head input %d, max_length %d)",
        spec.head.type,
        kind,
        spec.pooling,
        (" + embedding mean" if spec.embedding_features else "")
        + (" + log-likelihood" if spec.likelihood_features else ""),
        spec.hidden_size,
        spec.head_input_size,
        max_length,
    )
    return RewardModel(backbone, head, tokenizer, spec, scorer)


def save_reward_model(
    rm: RewardModel,
    folder: str | os.PathLike,
    state_dict: dict[str, torch.Tensor] | None = None,
    finetuned_head: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write the model folder atomically. `state_dict` (full RewardModel keys) overrides the live weights,
    e.g. weights gathered from DeepSpeed ZeRO-3 shards; `finetuned_head` (head keys) is the head before the
    refit, written to head_finetuned.safetensors."""
    folder = Path(folder)
    state = state_dict if state_dict is not None else rm.state_dict()
    backbone_state = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    head_state = {
        k[len("head.") :]: v.detach().float().cpu().contiguous()
        for k, v in state.items()
        if k.startswith("head.")
    }
    spec = rm.spec
    with atomic_dir(folder) as tmp:
        rm.backbone.save_pretrained(tmp, state_dict=backbone_state)
        rm.tokenizer.save_pretrained(tmp)
        save_file(head_state, str(tmp / HEAD_WEIGHTS))
        if finetuned_head is not None:
            kept = {k: v.detach().float().cpu().contiguous() for k, v in finetuned_head.items()}
            save_file(kept, str(tmp / FINETUNED_HEAD_WEIGHTS))
        if rm.likelihood_model is not None:
            rm.likelihood_model.save_pretrained(tmp / likelihood.FOLDER)
        if spec.backbone_format == "lora" and spec.base_model and Path(spec.base_model).exists():
            spec.base_model_relpath = os.path.relpath(Path(spec.base_model).resolve(), folder.resolve())
        atomic_write_json(tmp / HEAD_CONFIG, spec.to_json(rm.tokenizer))
    return folder


def _resolve_base(folder: Path, spec: ModelSpec) -> str:
    if spec.base_model_relpath and (folder / spec.base_model_relpath).exists():
        return str((folder / spec.base_model_relpath).resolve())
    if spec.base_model is None:
        raise ValueError(f"{folder / HEAD_CONFIG}: LoRA model without base_model")
    return spec.base_model


def load_reward_model(
    folder: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> RewardModel:
    """Load a saved reward model in eval mode on `device` (the only loader evaluation and GRPO use)."""
    folder = Path(folder)
    config_path = folder / HEAD_CONFIG
    if not config_path.exists():
        raise FileNotFoundError(f"{folder}: not a prefpipe reward model folder (no {HEAD_CONFIG})")
    spec = ModelSpec.from_json(read_json(config_path))
    from transformers import AutoModel, AutoTokenizer

    with model_load(folder, "reward model"):
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=spec.trust_remote_code)
        if tokenizer.pad_token_id is None:
            raise ValueError(f"{folder}: saved tokenizer has no pad token")
        if spec.backbone_format == "lora":
            from peft import PeftModel

            base = AutoModel.from_pretrained(
                _resolve_base(folder, spec), dtype=dtype, trust_remote_code=spec.trust_remote_code
            )
            backbone = PeftModel.from_pretrained(base, folder)
        else:
            backbone = AutoModel.from_pretrained(
                folder, dtype=dtype, trust_remote_code=spec.trust_remote_code
            )
        head = build_head(spec.head, spec.head_input_size, spec.hidden_size)
        head.load_state_dict(load_file(str(folder / HEAD_WEIGHTS)), strict=True)
        scorer = None
        if spec.likelihood_features:
            scorer = AutoModel.from_pretrained(
                folder / likelihood.FOLDER, dtype=dtype, trust_remote_code=False
            )
    return RewardModel(backbone, head, tokenizer, spec, scorer).to(device).eval()


def load_finetuned_head(folder: str | os.PathLike, rm: RewardModel) -> RewardHead | None:
    """The head as fine-tuned (before the refit) saved beside `rm`'s own, on its device in eval mode; None
    when the folder has none (no refit, or a model saved before it was kept)."""
    path = Path(folder) / FINETUNED_HEAD_WEIGHTS
    if not path.exists():
        return None
    head = build_head(rm.spec.head, rm.spec.head_input_size, rm.spec.hidden_size)
    head.load_state_dict(load_file(str(path)), strict=True)
    return head.to(rm.device).eval()
