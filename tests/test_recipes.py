"""The recipes of docs/reference/ARCHITECTURE.md ("Adding a thing") followed to the letter: a throwaway reward head,
GRPO loss aggregation, rollout engine and verifier, each added exactly as its recipe says (a new file written to a
temporary folder the package imports as it would the file in place; a registration the listed source file would
make, done in-process), then used through the settings a config builds (schema, settings layer, config checks) to
train or score for a step on a tiny model. Each test also counts the files its recipe lists and maps every one of
them to what the test did for it, so a recipe that grows, or lists a file the test does not need, fails here."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.models import build_reward, chat_tokenizer, save_tiny_base, tiny_llama
from support.settings import TINY_GRPO_RUN, grpo_settings, pipeline, reward_spec

from prefpipe.common.config import ConfigError
from prefpipe.data import verifier
from prefpipe.data.rl_prompts import load_rl_prompt_rows
from prefpipe.evaluation.pair_scoring import score_pairs
from prefpipe.grpo.algorithm import losses
from prefpipe.grpo.algorithm.losses import BatchNorms, aggregate, register_aggregation
from prefpipe.grpo.rewards import RewardInputs, WeightedReward, build_rewards
from prefpipe.grpo.rollout import engines
from prefpipe.grpo.rollout.engines import build_engine, register_engine
from prefpipe.grpo.training.trainer import GRPOTrainer
from prefpipe.reward import heads
from prefpipe.reward.heads import facts, registry
from prefpipe.reward.model import load_reward_model, save_reward_model
from prefpipe.reward.pairs import Pair
from prefpipe.reward.trainer import RewardTrainer

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "ARCHITECTURE.md"
ITEM = re.compile(r"^\d+\. `([^`]+)`", re.MULTILINE)
ROWS = [
    {"id": str(i), "prompt": p, "answer": "5", "kind": "add"}
    for i, p in enumerate(["What is 2 plus 3?", "Say five.", "Count to 5.", "Answer 5."])
]


def recipe_files(title: str) -> list[str]:
    """The files the recipe `### <title>` lists (its numbered items, each opening with a backticked path)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"\n### {title}\n")
    end = min(i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1), len(text)) if i > 0)
    return ITEM.findall(text[start:end])


def check_recipe(title: str, done: dict[str, str], at_most: int | None) -> None:
    """The recipe lists exactly the files this test did something for (`done`: file -> what), within budget."""
    files = recipe_files(title)
    assert files == list(done), f"{title!r}: the recipe lists {files}, the test followed {list(done)}"
    if at_most is not None:
        assert len(files) <= at_most, f"{title!r} touches {len(files)} files, more than {at_most}"


@pytest.fixture
def package_folder(tmp_path, monkeypatch):
    """Write a module into a temporary folder on a package's `__path__`: what a new file in that package's
    folder is to the import system, without writing into src/."""
    added: list[str] = []

    def add(package, name: str, source: str) -> str:
        folder = tmp_path / package.__name__.replace(".", "_")
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
        if str(folder) not in package.__path__:
            monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        added.append(f"{package.__name__}.{name}")
        return added[-1]

    yield add
    for module in added:
        sys.modules.pop(module, None)


def _trainer(settings, rewards, tmp_path, rows=ROWS) -> GRPOTrainer:
    tok = chat_tokenizer()
    return GRPOTrainer(settings, tiny_llama(tok), tok, "none", rows, rewards, tmp_path, run_fingerprint="fp")


def _one_step(**run) -> dict:
    return {**TINY_GRPO_RUN, "steps": 1, "checkpoint_every": 0, "sample_every": 0, **run}


def _digits(inputs) -> torch.Tensor:
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in inputs.completions])


# ------------------------------------------------------------------------------------------------ a reward head
HEAD_MODULE = '''"""A throwaway head: a bounded scalar reward r(x, y) = tanh(w . h + b)."""

from __future__ import annotations

import torch
from torch import nn

from prefpipe.reward.heads.base import RewardHead
from prefpipe.reward.heads.registry import register


@register("recipe_head")
class RecipeHead(RewardHead):
    encoding_keys = ("reward",)
    scalar_reward = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.value = nn.Linear(size, 1)

    @classmethod
    def from_settings(cls, settings, input_size: int, prompt_size: int) -> RecipeHead:
        return cls(input_size)

    def forward(self, h: torch.Tensor, h_prompt: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"reward": torch.tanh(self.value(h).squeeze(-1))}

    @classmethod
    def score(cls, enc_a, enc_b):
        return enc_a["reward"] - enc_b["reward"], None

    @classmethod
    def training_score(cls, out_c, out_r) -> torch.Tensor:
        return out_c["reward"] - out_r["reward"]

    @classmethod
    def rewards(cls, enc) -> torch.Tensor:
        return enc["reward"]
'''


@pytest.fixture
def recipe_head(package_folder, monkeypatch) -> Iterator[type]:
    # 3. facts.py: its HEAD_FACTS entry (before the head registers: @register reads its flags there)
    monkeypatch.setitem(
        facts.HEAD_FACTS, "recipe_head", facts.HeadFacts("Recipe", True, False, "r = tanh(w . h + b).")
    )
    # 1. the head's file in the package's folder; the registry imports every module there
    package_folder(heads, "recipe_head", HEAD_MODULE)
    registry.import_heads()
    yield registry.HEADS["recipe_head"]
    registry.HEADS.pop("recipe_head", None)


def test_the_head_recipe(recipe_head, tmp_path):
    done = {
        "src/prefpipe/reward/heads/<name>.py": "HEAD_MODULE, imported from a folder on the package's path",
        "tests/test_head_<name>.py": "its reward against tanh by hand, below",
        "src/prefpipe/reward/heads/facts.py": "the HEAD_FACTS entry",
    }
    check_recipe("A reward head", done, at_most=3)
    assert recipe_head.__module__ == "prefpipe.reward.heads.recipe_head"
    assert facts.head_facts("recipe_head").display == "Recipe" and recipe_head.scalar_reward

    base = save_tiny_base(tmp_path / "base")
    train = {"steps": 1, "head_fit": {"before_steps": 0, "after_steps": 0}}
    rm, settings = build_reward(base, "recipe_head", train=train)  # settings built and checked from a config
    assert settings.head.type == "recipe_head" and isinstance(rm.head, recipe_head)
    pairs = [Pair(f"p{i}", r["prompt"], "5", "I cannot.", "chat-arith") for i, r in enumerate(ROWS)]
    result = RewardTrainer(rm, settings, pairs, tmp_path / "run").train()
    assert len(result.history) == 1 and torch.isfinite(torch.tensor(result.history[0]["loss"]))

    save_reward_model(rm, tmp_path / "model")
    assert json.loads((tmp_path / "model" / "head_config.json").read_text())["head_type"] == "recipe_head"
    loaded = load_reward_model(tmp_path / "model").eval()
    prompts = [r["prompt"] for r in ROWS]
    scores = score_pairs(loaded, prompts, ["5"] * 4, ["I cannot."] * 4, batch_size=2)
    good, bad = (loaded.encode(prompts, [answer] * 4, 4) for answer in ("5", "I cannot."))
    torch.testing.assert_close(torch.from_numpy(scores.score).float(), good["reward"] - bad["reward"])
    (reward,) = build_rewards([reward_spec("reward_model")], loaded)  # a GRPO reward pays it per response
    inputs = RewardInputs(prompts, ["5"] * 4, ["5"] * 4, ["add"] * 4, [True] * 4, 2)
    torch.testing.assert_close(reward.fn(inputs), good["reward"])

    # 2. its test: the reward is tanh(w . h + b), computed here from the weights
    head = recipe_head(3)
    h = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        by_hand = torch.tanh(h @ head.value.weight[0] + head.value.bias[0])
        torch.testing.assert_close(head(h, None)["reward"], by_hand)


# ------------------------------------------------------------------------------------- a GRPO loss aggregation
def _per_sequence_sum(masked: torch.Tensor, m: torch.Tensor, norms: BatchNorms) -> torch.Tensor:
    """A throwaway aggregation: each sequence's summed token losses, averaged over the batch's sequences."""
    _per_sequence_sum.calls += 1
    return masked.sum() / norms.num_sequences


_per_sequence_sum.calls = 0


@pytest.fixture
def recipe_loss():
    # 1. losses.py: the function under @register_aggregation (registered here, as the module would on import)
    register_aggregation("recipe_loss")(_per_sequence_sum)
    yield _per_sequence_sum
    losses.AGGREGATORS.pop("recipe_loss", None)


def test_the_loss_recipe(recipe_loss, tmp_path):
    done = {
        "src/prefpipe/grpo/algorithm/losses.py": "register_aggregation('recipe_loss')",
        "tests/test_grpo_loss_<name>.py": "the value against a sum by hand, below",
    }
    check_recipe("A GRPO loss aggregation", done, at_most=2)
    # 2. its test: (1*1 + 2*1 + 3*0) + (4*1 + 5*0 + 6*0) over 2 sequences
    per_token, mask = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert float(aggregate(per_token, mask, "recipe_loss", BatchNorms(2, 3, 1, 3))) == pytest.approx(3.5)

    settings = grpo_settings(_one_step(loss_type="recipe_loss"))
    before = recipe_loss.calls
    summary = _trainer(settings, [WeightedReward("digits", 1.0, _digits)], tmp_path).train()
    assert recipe_loss.calls > before and summary["all_finite"]


# ------------------------------------------------------------------------------------------- a rollout engine
ENGINE_MODULE = '''"""A throwaway engine: the plain engine's rollouts, counting its calls."""

from __future__ import annotations

from prefpipe.grpo.rollout.engines.base import PlainEngine


class RecipeEngine(PlainEngine):
    generated = 0
    synced: list[int] = []

    def generate(self, policy, tokenizer, prompts, uniforms, seed, first_prompt=0):
        type(self).generated += 1
        return super().generate(policy, tokenizer, prompts, uniforms, seed, first_prompt)

    def sync(self, policy, step):
        type(self).synced.append(step)
        return {}
'''


@pytest.fixture
def recipe_engine(package_folder):
    # 1. the engine's own module in the engines package's folder
    module = package_folder(engines, "recipe_engine", ENGINE_MODULE)

    # 2. engines/__init__.py: its factory under @register_engine (registered here, as the package would)
    @register_engine("recipe_engine")
    def _recipe_engine(settings, policy, tokenizer, work_dir, dp):
        return importlib.import_module(module).RecipeEngine(settings)

    yield module
    engines.ENGINES.pop("recipe_engine", None)


def test_the_engine_recipe(recipe_engine, tmp_path):
    done = {
        "src/prefpipe/grpo/rollout/engines/<name>.py": "ENGINE_MODULE, from a folder on the package's path",
        "src/prefpipe/grpo/rollout/engines/__init__.py": "register_engine('recipe_engine')",
        "tests/test_engine_<name>.py": "its rollout against the plain engine's, below",
    }
    check_recipe("A rollout engine", done, at_most=3)
    settings = grpo_settings(_one_step(rollout={"engine": "recipe_engine"}))
    engine = build_engine(settings, None, None, tmp_path)
    assert type(engine).__module__ == recipe_engine

    # 3. its test: the same uniforms give the plain engine's rollout, token for token
    tok = chat_tokenizer()
    policy, prompts = tiny_llama(tok), [r["prompt"] for r in ROWS[:2]]
    uniforms = torch.rand(
        2 * settings.num_generations, settings.max_new_tokens, generator=torch.Generator().manual_seed(0)
    )
    plain = build_engine(grpo_settings(_one_step()), None, None, tmp_path)
    got, want = (e.generate(policy, tok, prompts, uniforms, seed=0) for e in (engine, plain))
    assert torch.equal(got.completion_ids, want.completion_ids) and got.texts == want.texts

    cls = type(engine)
    before = cls.generated
    summary = _trainer(settings, [WeightedReward("digits", 1.0, _digits)], tmp_path / "run").train()
    assert cls.generated > before and 0 in cls.synced and summary["all_finite"]


# ------------------------------------------------------------------------------------------------- a verifier
def _first_word(answer: str, completion: str) -> float:
    """A throwaway verifier: 1 when the completion's first word is the answer (any case), else 0."""
    words = completion.split()
    return float(bool(words) and words[0].strip(".,!").lower() == answer.lower())


@pytest.fixture
def recipe_verifier():
    # 1. verifier.py: the function under @register_verifier (registered here, as the module would on import)
    verifier.register_verifier("recipe_kind")(_first_word)
    yield _first_word
    verifier.VERIFIERS.pop("recipe_kind", None)


def test_the_verifier_recipe(recipe_verifier, tmp_path):
    done = {
        "src/prefpipe/data/verifier.py": "register_verifier('recipe_kind')",
        "tests/test_verifier_<kind>.py": "its scores on completions by hand, below",
    }
    check_recipe("A verifier", done, at_most=2)
    # 2. its test
    got = [verifier.score("recipe_kind", "Paris", c) for c in ("paris.", "Paris is it", "It is Paris", "")]
    assert got == [1, 1, 0, 0]

    for part in ("train", "test"):
        lines = [
            json.dumps({"id": f"{part}{i}", "prompt": f"Capital {part} {i}?", "answer": "Paris"})
            for i in range(4)
        ]
        (tmp_path / f"{part}.jsonl").write_text("\n".join(lines) + "\n")
    prompts = {
        "source": "jsonl",
        "path": str(tmp_path / "train.jsonl"),
        "test_path": str(tmp_path / "test.jsonl"),
    }
    with pytest.raises(
        ConfigError, match=r"data\.prompts\.verifier 'no_such_kind' is not a registered verifier"
    ):
        pipeline({"data": {"prompts": {**prompts, "verifier": "no_such_kind"}}})
    settings = pipeline({"data": {"prompts": {**prompts, "verifier": "recipe_kind"}}})
    rows, _, _ = load_rl_prompt_rows(settings.data.prompts, "drop", 0)
    assert {r["kind"] for r in rows} == {"recipe_kind"}

    (reward,) = build_rewards([reward_spec("verifier")])  # the GRPO verifier reward grades with it
    inputs = RewardInputs(
        ["Capital?"] * 2, ["Paris!", "Rome"], ["Paris"] * 2, ["recipe_kind"] * 2, [True] * 2, 2
    )
    assert reward.fn(inputs).tolist() == [1.0, 0.0]
    run = grpo_settings(_one_step())
    summary = _trainer(run, build_rewards([reward_spec("verifier")]), tmp_path / "run", rows=rows).train()
    assert summary["all_finite"]
