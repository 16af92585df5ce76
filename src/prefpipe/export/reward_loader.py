"""Load and use a reward model exported by prefpipe (`python -m prefpipe.export_reward`), with torch and
transformers only.

This file is copied into every exported head folder as `reward_loader.py`, next to `prefpipe_chat.py` (prefpipe's
own text renderer, prefpipe.common.chat, copied verbatim) and `prefpipe_expected_sigmoid.py` (the evaluation's
integration of a Bayesian head's P(a > b), prefpipe.common.expected_sigmoid); none imports prefpipe, so the folder works
wherever torch and transformers are installed:

    import importlib.util, torch
    spec = importlib.util.spec_from_file_location("reward_loader", "EXPORT/reward_loader.py")
    loader = importlib.util.module_from_spec(spec); spec.loader.exec_module(loader)
    rm = loader.ExportedRewardModel.from_folder("EXPORT")
    p = rm.preference_prob(["What is 2 + 3?"], ["5"], ["6"])  # P(first response preferred), one per row
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": "What is 2 + 3?"}]
    p = rm.preference_prob([history], ["5"], ["6"])  # a conversation: the turns before the reply

A conversation (every method's `prompts` entry) is a plain prompt string (one user turn) or a list of
{"role": "system" | "user" | "assistant", "content": str} messages ending on the user's turn.

What it reproduces (to float rounding) is prefpipe's scoring of one (conversation, response) row:
1. Text: `prefpipe_chat.format_pairs`, the function prefpipe renders every reward input with: the chat
   template's rendering of the conversation + the reply as the final assistant turn, up to the template's end
   of that turn (e.g. Gemma's <end_of_turn>; `reply_end` in reward_head.json), and the conversation's
   generation prompt; no template: the plain history ("Human: ...\n\nAssistant: ..." for several turns) +
   two newlines + response + EOS. Tokens: special tokens added only when there is no template; the prompt's
   last token is where the two token lists (pair text, generation prompt) stop agreeing.
   A row longer than `max_length` loses prompt tokens from the left (leading special tokens and the prompt's
   last token kept), then response tokens (trailing special tokens kept) from the right, or from the left where
   `keep_response` in reward_head.json is "end" (a folder without the key keeps each response's start).
2. Features: the backbone's final states pooled as `pooling` says (last / first real token, mean over real
   tokens, mean over response tokens), optionally followed by the mean input embedding of the response
   tokens (`embedding_features`) and by the mean and minimum next-token log-prob of the response tokens under
   the frozen starting model in `likelihood_model/` through its tied embeddings, its logits soft-capped where
   the model caps them (Gemma 2) (`likelihood_features`).
   The prompt gate reads the final state at the prompt's last token.
3. Head (`reward_head.safetensors`, settings in `reward_head.json`): features standardised by the stored
   mean and 1/sd when present; then
   - bt:   r = w . h + b;  s(a > b) = r(a) - r(b)
   - gpm:  v = W h (unit-normalised when `normalize`), gate lambda(x) = k softmax(G h_x / sqrt(H));
           s(a > b) = sum_l lambda_l (a_2l b_2l+1 - a_2l+1 b_2l), lambda the mean of both rows' gates
   - bgpm: [m ; log var] = W h, log var (+ bias) clamped, mean = m unit-normalised when `normalize`;
           s uses the means, Var[s] its closed form; P(a > b) = E[sigmoid(s / tau)] for s ~ N(s, Var[s]),
           integrated numerically by `prefpipe_expected_sigmoid.py` (prefpipe.common.expected_sigmoid, copied):
           the probability prefpipe's evaluation reports for the pair (its per_example `prob`).
   P(a > b) = sigmoid(s / tau) for bt and gpm.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

HEAD_JSON = "reward_head.json"
HEAD_WEIGHTS = "reward_head.safetensors"
FORMAT = "prefpipe-reward-head"
CHAT_FILE = "prefpipe_chat.py"  # prefpipe.common.chat, copied by the export (prefpipe.export.common)
# prefpipe.common.expected_sigmoid, copied by the export: a Bayesian head's P(a > b) as the evaluation integrates it
EXPECTED_SIGMOID_FILE = "prefpipe_expected_sigmoid.py"
Conversation = str | list[dict[str, str]]


def load_shipped_module(folder: str | Path, file: str) -> ModuleType:
    """A module the export copied into the folder (`prefpipe_chat.py`: prefpipe's own renderer of reward inputs,
    so the text is prefpipe's; `prefpipe_expected_sigmoid.py`: the evaluation's integration of P(a > b))."""
    path = Path(folder) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (export the model again with prefpipe)")
    spec = importlib.util.spec_from_file_location(Path(file).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_chat_module(folder: str | Path) -> ModuleType:
    """The folder's `prefpipe_chat.py`: prefpipe's own renderer of reward inputs, so the text is prefpipe's."""
    return load_shipped_module(folder, CHAT_FILE)


def check_conversations(chat: ModuleType, prompts: list[Conversation]) -> None:
    """One line naming the first entry that is neither a prompt string nor a usable message list."""
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str) and not chat.is_messages(prompt):
            raise ValueError(
                f"prompts[{i}]: expected a prompt string or a list of {{'role', 'content'}} messages (roles "
                f"{', '.join(chat.ROLE_LABELS)}) ending on the user's turn, got {str(prompt)[:80]!r}"
            )


def _pair_score(a: torch.Tensor, b: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """The GPM's gated skew-symmetric score of embedding pairs (a_2l b_2l+1 - a_2l+1 b_2l)."""
    pa, pb = a.reshape(*a.shape[:-1], -1, 2), b.reshape(*b.shape[:-1], -1, 2)
    return ((pa[..., 0] * pb[..., 1] - pa[..., 1] * pb[..., 0]) * gate).sum(-1)


def _gate(w: dict, config: dict, h_prompt: torch.Tensor) -> torch.Tensor:
    k = config["dim"] // 2
    if "gate.prompt_head.weight" not in w:
        return h_prompt.new_ones(h_prompt.shape[0], k)
    logits = F.linear(h_prompt, w["gate.prompt_head.weight"]) / math.sqrt(config["prompt_size"])
    return F.softmax(logits, dim=-1) * k


def _encode_bt(w: dict, config: dict, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"reward": F.linear(h, w["value_head.weight"], w["value_head.bias"]).squeeze(-1)}


def _encode_gpm(w: dict, config: dict, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
    out = F.linear(h, w["value_head.weight"])
    emb = F.normalize(out, p=2, dim=-1) if config["normalize"] else out
    return {"embedding": emb, "gate": _gate(w, config, h_prompt)}


def _encode_bgpm(w: dict, config: dict, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
    raw_mean, logvar = F.linear(h, w["value_head.weight"]).split(config["dim"], dim=-1)
    if "logvar_bias" in w:
        logvar = logvar + w["logvar_bias"]
    logvar = logvar.clamp(*config["logvar_clamp"])
    mean = F.normalize(raw_mean, p=2, dim=-1) if config["normalize"] else raw_mean
    return {"mean": mean, "var": logvar.exp(), "gate": _gate(w, config, h_prompt)}


def _compare_bt(a: dict, b: dict) -> tuple[torch.Tensor, None]:
    return a["reward"] - b["reward"], None


def _compare_gpm(a: dict, b: dict) -> tuple[torch.Tensor, None]:
    return _pair_score(a["embedding"], b["embedding"], 0.5 * (a["gate"] + b["gate"])), None


def _compare_bgpm(a: dict, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
    gate = 0.5 * (a["gate"] + b["gate"])
    ma, va, mb, vb = a["mean"], a["var"], b["mean"], b["var"]

    def swap(v: torch.Tensor) -> torch.Tensor:
        return v.reshape(*v.shape[:-1], -1, 2).flip(-1).reshape(v.shape)

    terms = ma.pow(2) * swap(vb) + mb.pow(2) * swap(va) + va * swap(vb)
    variance = (terms.reshape(*terms.shape[:-1], -1, 2).sum(-1) * gate.pow(2)).sum(-1)
    return _pair_score(ma, mb, gate), variance


class HeadType(NamedTuple):
    """How this loader scores one head type: features -> encoding, encodings -> (s, Var[s] or None). (A
    NamedTuple, not a dataclass: the file is loaded from its path, outside sys.modules.)"""

    encode: Callable[[dict, dict, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]
    compare: Callable[[dict, dict], tuple[torch.Tensor, torch.Tensor | None]]
    scalar_reward: bool  # one reward per response (rewards())
    bayesian: bool  # P(a > b) = E[sigmoid(s / tau)] over the score's posterior N(s, Var[s])


# The head types this loader scores (its own table: the folder does not import prefpipe's head registry; a
# head added to prefpipe is exportable once its scoring is added here, tests/test_export_head_types.py).
HEAD_TYPES: dict[str, HeadType] = {
    "bt": HeadType(_encode_bt, _compare_bt, scalar_reward=True, bayesian=False),
    "gpm": HeadType(_encode_gpm, _compare_gpm, scalar_reward=False, bayesian=False),
    "bgpm": HeadType(_encode_bgpm, _compare_bgpm, scalar_reward=False, bayesian=True),
}


def head_type(config: dict[str, Any], where: str | Path) -> HeadType:
    """The loader's scoring of the folder's `head_type`; ValueError naming the type and the known ones."""
    name = config.get("head_type")
    if name not in HEAD_TYPES:
        raise ValueError(
            f"{where}: head_type {name!r} is not a head type this loader can score (it knows "
            f"{', '.join(HEAD_TYPES)}); a head added to prefpipe needs its scoring in prefpipe/export/"
            "reward_loader.py (HEAD_TYPES) before its models can be exported"
        )
    return HEAD_TYPES[name]


class ExportedRewardModel:
    """Backbone, tokenizer and head of an exported reward model; every method takes conversations (prompt
    strings or message lists) and reply strings."""

    def __init__(self, folder: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        folder = Path(folder)
        self.config: dict[str, Any] = json.loads((folder / HEAD_JSON).read_text())
        if self.config.get("format") != FORMAT:
            raise ValueError(f"{folder / HEAD_JSON}: not a {FORMAT} folder")
        self.kind = head_type(self.config, folder / HEAD_JSON)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.backbone = AutoModel.from_pretrained(folder, dtype=dtype).to(device).eval()
        self.likelihood_model = None
        if self.config["likelihood_features"]:
            path = folder / "likelihood_model"
            self.likelihood_model = AutoModel.from_pretrained(path, dtype=dtype).to(device).eval()
        self.head = {k: v.to(device) for k, v in load_file(str(folder / HEAD_WEIGHTS)).items()}
        self.chat = load_chat_module(folder)
        self.expected_sigmoid = (
            load_shipped_module(folder, EXPECTED_SIGMOID_FILE) if self.kind.bayesian else None
        )
        self.device = device

    @classmethod
    def from_folder(cls, folder: str | Path, **kwargs: Any) -> ExportedRewardModel:
        return cls(folder, **kwargs)

    # ------------------------------------------------------------------ text -> token ids
    def _ids(self, text: str) -> list[int]:
        special = not self.tokenizer.chat_template
        return self.tokenizer(text, add_special_tokens=special, verbose=False)["input_ids"]

    def tokenize_many(self, prompts: list[Conversation], responses: list[str]) -> list[tuple[list[int], int]]:
        """Token ids of each row and the number of tokens up to and including the prompt's last one."""
        check_conversations(self.chat, prompts)
        heads, texts = self.chat.format_pairs(self.tokenizer, list(prompts), list(responses))
        rows = []
        for head, text in zip(heads, texts, strict=True):
            ids, prompt_ids = self._ids(text), self._ids(head)
            common = 0
            while common < min(len(ids), len(prompt_ids)) and ids[common] == prompt_ids[common]:
                common += 1
            rows.append(self._truncate(ids, max(1, min(common, len(ids) - 1))))
        return rows

    def tokenize(self, prompt: Conversation, response: str) -> tuple[list[int], int]:
        """tokenize_many for one row."""
        return self.tokenize_many([prompt], [response])[0]

    def _truncate(self, ids: list[int], prompt_len: int) -> tuple[list[int], int]:
        limit, special = self.config["max_length"], set(self.tokenizer.all_special_ids)
        excess = len(ids) - limit
        if excess <= 0:
            return ids, prompt_len
        lead = 0
        while lead < prompt_len - 1 and ids[lead] in special:
            lead += 1
        if excess <= prompt_len - lead - 1:  # the prompt alone gives way
            return ids[:lead] + ids[lead + excess :], prompt_len - excess
        kept_head = ids[:lead] + [ids[prompt_len - 1]]
        response = ids[prompt_len:]
        tail = 0
        while tail < len(response) and response[len(response) - 1 - tail] in special:
            tail += 1
        room = limit - len(kept_head) - tail
        if room < 1:
            raise ValueError(f"max_length {limit} is too small to hold any response token")
        body = response[: len(response) - tail]
        kept = body[len(body) - room :] if self.config.get("keep_response", "start") == "end" else body[:room]
        return kept_head + kept + response[len(body) :], len(kept_head)

    # ------------------------------------------------------------------ token ids -> features
    def _batch(self, prompts: list[Conversation], responses: list[str]) -> dict[str, torch.Tensor]:
        """Right-padded ids, mask and the prompt's last position per row."""
        rows = self.tokenize_many(prompts, responses)
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        prompt_index = torch.tensor([n - 1 for _, n in rows])
        return {"input_ids": ids, "attention_mask": mask, "prompt_index": prompt_index}

    def _states(self, model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        kwargs = {"use_cache": False} if self.config["backbone_kind"] == "decoder" else {}
        return model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state

    @staticmethod
    def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.bool().unsqueeze(-1)
        total = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(1)
        return total / keep.sum(1).clamp(min=1).to(x.dtype)

    def features(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's response features (N, F) and the prompt's last final state (N, H)."""
        ids, mask, prompt_index = (
            batch[k].to(self.device) for k in ("input_ids", "attention_mask", "prompt_index")
        )
        hidden = self._states(self.backbone, ids, mask)
        rows = torch.arange(ids.shape[0], device=ids.device)
        positions = torch.arange(ids.shape[1], device=ids.device)
        response = mask * (positions[None, :] > prompt_index[:, None]).to(mask.dtype)
        pooling = self.config["pooling"]
        if pooling == "last":
            pooled = hidden[rows, (mask * positions).argmax(1)]
        elif pooling == "first":
            pooled = hidden[rows, mask.argmax(1)]
        elif pooling == "mean":
            pooled = self._masked_mean(hidden, mask)
        else:  # response_mean
            pooled = self._masked_mean(hidden, response)
        parts = [pooled]
        if self.config["embedding_features"]:
            parts.append(
                self._masked_mean(self.backbone.get_input_embeddings()(ids), response).to(pooled.dtype)
            )
        if self.likelihood_model is not None:
            parts.append(self._likelihood(ids, mask, response).to(pooled.dtype))
        return torch.cat(parts, dim=-1), hidden[rows, prompt_index]

    def _likelihood(self, ids: torch.Tensor, mask: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
        """[mean ; min] next-token log-prob of the response tokens under the frozen tied-embedding model."""
        hidden = self._states(self.likelihood_model, ids, mask)
        table = self.likelihood_model.get_input_embeddings().weight
        logits = hidden[:, :-1].float() @ table.float().T
        softcap = getattr(self.likelihood_model.config, "final_logit_softcapping", None)
        if softcap:  # Gemma 2 soft-caps its logits before the softmax
            logits = softcap * torch.tanh(logits / softcap)
        picked = logits.log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        log_probs = torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)
        keep = response.bool()
        count = keep.sum(1)
        mean = torch.where(keep, log_probs, 0.0).sum(1) / count.clamp(min=1)
        least = torch.where(keep, log_probs, torch.inf).amin(1)
        return torch.stack([mean, torch.where(count > 0, least, 0.0)], dim=-1)

    # ------------------------------------------------------------------ features -> encodings
    def _head(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        w, h, h_prompt = self.head, h.float(), h_prompt.float()
        if "input_norm.mean" in w:
            h = (h - w["input_norm.mean"]) * w["input_norm.inv_sd"]
        return self.kind.encode(w, self.config, h, h_prompt)

    @torch.inference_mode()
    def encode(
        self, prompts: list[Conversation], responses: list[str], batch_size: int = 16
    ) -> dict[str, torch.Tensor]:
        """The head's encoding of each (conversation, response) row (float32, CPU)."""
        parts: list[dict[str, torch.Tensor]] = []
        for start in range(0, len(prompts), batch_size):
            batch = self._batch(prompts[start : start + batch_size], responses[start : start + batch_size])
            parts.append(self._head(*self.features(batch)))
        return {k: torch.cat([p[k] for p in parts]).float().cpu() for k in parts[0]}

    # ------------------------------------------------------------------ encodings -> preferences
    def compare(self, enc_a: dict, enc_b: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """s(a > b | x) per row and, for a Bayesian head, its variance (else None)."""
        return self.kind.compare(enc_a, enc_b)

    def preference_prob(
        self, prompts: list[Conversation], responses_a: list[str], responses_b: list[str]
    ) -> torch.Tensor:
        """P(response a preferred to response b | conversation) per row (float64)."""
        enc_a, enc_b = self.encode(prompts, responses_a), self.encode(prompts, responses_b)
        return self.preference_prob_encoded(enc_a, enc_b)

    def preference_prob_encoded(self, enc_a: dict, enc_b: dict) -> torch.Tensor:
        """sigmoid(s / tau); a Bayesian head: E[sigmoid(s / tau)], s ~ N(s, Var[s]), integrated as prefpipe's
        evaluation integrates it (the same code, `prefpipe_expected_sigmoid.py`)."""
        score, variance = self.compare(enc_a, enc_b)
        tau = self.config["tau"]
        if variance is None:
            return torch.sigmoid(score.double() / tau)
        prob = self.expected_sigmoid.gaussian_preference_prob(
            score.double().numpy(), variance.double().numpy(), tau
        )
        return torch.from_numpy(prob)

    def rewards(self, prompts: list[Conversation], responses: list[str]) -> torch.Tensor:
        """r(x, y) per row (heads with one reward per response only: gpm heads score pairs)."""
        if not self.kind.scalar_reward:
            raise TypeError(f"a {self.config['head_type']!r} head has no scalar reward per response")
        return self.encode(prompts, responses)["reward"]
