"""What a saved reward model is besides its weights: head_config.json (`ModelSpec`) and the folder's file names.

head_config.json holds the head's settings (type, dims, tau, options), the backbone's kind, width and pooling,
the tokenisation (max_length, which end of a too-long response stays, padding side, pad-token fix), the LoRA base reference and the head's input
features. See docs/reference/CONTRACTS.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prefpipe.common.chat import has_chat_template, reply_end
from prefpipe.reward import likelihood
from prefpipe.settings.reward import BayesSettings, HeadSettings, LengthHeadSettings

HEAD_CONFIG = "head_config.json"
HEAD_WEIGHTS = "head.safetensors"
# The head as fine-tuned, before the head refit (evaluation scores it as an extra head).
FINETUNED_HEAD_WEIGHTS = "head_finetuned.safetensors"
FORMAT_VERSION = 1


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
    # Folders saved before data.keep_response kept each too-long response's start.
    keep_response: str = "start"  # start | end: the part of a too-long response that truncation keeps

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
            "reply_end": reply_end(tokenizer),
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
            bayes.pop("mc_samples", None)  # folders saved when P(a > b) was a Monte Carlo average: unused now
        length = head.pop("length_head", None)  # absent in folders saved before length heads
        if length:  # folders saved before these options trained with ODIN's form
            length = {
                "follow": "pearson",
                "decorrelation": "abs",
                "warmup_steps": 0,
                "length_scale": "chars",
            } | length
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k != "head" and k in data}
        head_settings = HeadSettings(
            **head,
            bayes=BayesSettings(**bayes) if bayes else None,
            length_head=LengthHeadSettings(**length) if length else None,
        )
        spec = cls(head=head_settings, **fields)
        if data.get("head_input_size", spec.head_input_size) != spec.head_input_size:
            raise ValueError(
                f"{HEAD_CONFIG}: head_input_size {data['head_input_size']} does not match hidden_size "
                f"{spec.hidden_size} with embedding_features {spec.embedding_features} and "
                f"likelihood_features {spec.likelihood_features}"
            )
        return spec
