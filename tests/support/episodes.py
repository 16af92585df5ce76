"""Multi-turn test material: a 3-paragraph corpus, demonstration episodes in the tag format, a tiny Llama taught
them by a few hundred steps of plain next-token training (so greedy decoding calls the tool, reads the result and
answers), and an independent decode that re-encodes each row's whole sequence at every step (no KV cache)."""

from __future__ import annotations

import torch

from prefpipe.common.chat import format_prompt
from prefpipe.common.io import write_jsonl
from prefpipe.generation.tokens import tokenize_prompts
from prefpipe.grpo.environments.base import EnvironmentRunner
from prefpipe.grpo.environments.registry import build_environment
from prefpipe.grpo.rollout.episodes.episode import Episode, episode_rollout
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, TagFormat
from prefpipe.grpo.rollout.sampling import pick_tokens
from support.models import chat_tokenizer, tiny_llama

PARAGRAPHS = [
    {"title": "Cats", "text": "The cat sat on the mat."},
    {"title": "Dogs", "text": "A dog barks in the park."},
    {"title": "Birds", "text": "Birds fly over the river."},
]
SEARCH = {"type": "search", "corpus": "row", "top_k": 1, "k1": 1.5, "b": 0.75}
# (prompt, the policy's turns): each turn but the last calls the search tool, the last answers
DEMOS = [
    ("Which animal barks?", ["<search>dog barks</search>", "<answer>dog</answer>"]),
    ("Where do birds fly?", ["<search>birds fly</search>", "<answer>river</answer>"]),
]


# which paragraph supports each demonstration's question
SUPPORTING = {"Which animal barks?": "Dogs", "Where do birds fly?": "Birds"}


def question_rows() -> list[dict]:
    """The demonstrations' questions as RL prompt rows: answer, an alias, the corpus with its supporting title."""
    rows = []
    for i, (prompt, turns) in enumerate(DEMOS):
        answer = turns[-1][len("<answer>") : -len("</answer>")]
        paragraphs = [{**p, "is_supporting": p["title"] == SUPPORTING[prompt]} for p in PARAGRAPHS]
        rows.append(
            {"id": f"q{i}", "prompt": prompt, "answer": answer, "aliases": ["the " + answer],
             "kind": "exact_match", "paragraphs": paragraphs}
        )  # fmt: skip
    return rows


class Flaky:
    """A user's tool: echoes its argument, returns nothing for 'blank', raises for 'boom', floods for 'long'."""

    def __init__(self, tools: tuple[str, ...] = ("echo",)) -> None:
        self.tools = tools

    def reset(self, row):
        self.row = row

    def step(self, call):
        if call.argument == "boom":
            raise RuntimeError("the tool broke")
        if call.argument == "blank":
            return "  "
        return "x" * 100 if call.argument == "long" else call.argument


def runner(max_result_chars: int = 400) -> EnvironmentRunner:
    return EnvironmentRunner(build_environment(SEARCH), max_result_chars=max_result_chars)


def demo_ids(tok, prompt: str, turns: list[str]) -> tuple[list[int], list[int], list[str]]:
    """(prompt ids, episode ids, owner per episode token) of a demonstration, results from the real search."""
    fmt, env = TagFormat(), runner()
    env.reset({"paragraphs": PARAGRAPHS})
    prompt_ids = tok(format_prompt(tok, prompt))["input_ids"]
    ids, owners = [], []
    for text in turns:
        part = tok.encode(text, add_special_tokens=False)
        ids += part
        owners += ["policy"] * len(part)
        end = fmt.turn_end(text, at_eos=False)
        if end.kind == CALL:
            result = tok.encode(fmt.render(env.run(end.call)), add_special_tokens=False)
            ids += result
            owners += ["environment"] * len(result)
    return prompt_ids, ids, owners


def built_episodes(tok, group: int):
    """(rollout, episodes): two prompts x `group` episodes, each search -> result -> answer (results from the real
    search environment); the second row of a group searches the other demo's query, so rows and lengths differ."""
    prompts, episodes = [p for p, _ in DEMOS], []
    for i, (prompt, turns) in enumerate(DEMOS):
        other = DEMOS[1 - i][1][0]
        for t in (turns, [other, "<answer>dog</answer>"])[:group]:
            _, ids, owners = demo_ids(tok, prompt, t)
            ep = Episode()
            for token, owner in zip(ids, owners, strict=True):
                ep.add(owner, [token])
            episodes.append(ep)
    batch = tokenize_prompts(tok, prompts, None)
    return episode_rollout(tok, batch, group, episodes, tok.pad_token_id, torch.device("cpu")), episodes


def teach(model, tok, steps: int = 300, lr: float = 3e-3) -> torch.nn.Module:
    """Next-token training on the demonstrations' policy tokens until greedy decoding reproduces them."""
    seqs = [demo_ids(tok, p, t) for p, t in DEMOS]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.0
        for prompt_ids, ids, owners in seqs:
            full = torch.tensor([prompt_ids + ids])
            logp = model(full).logits[0, :-1].log_softmax(-1)
            targets = full[0, 1:]
            on = torch.tensor(
                [0] * (len(prompt_ids) - 1) + [o == "policy" for o in owners], dtype=torch.float
            )
            loss = loss - (logp.gather(1, targets[:, None]).squeeze(1) * on).sum() / on.sum()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def reencode_episode(
    model, tok, prompt_ids, row, env, limits, eos_ids, uniforms=None, sampling=(1.0, 0, 1.0)
):
    """One row's episode the slow, obvious way: the whole sequence through the model at every step."""
    fmt, seq, ids, owners, turn, n_policy, turns = TagFormat(), list(prompt_ids), [], [], [], 0, 0
    env.reset(row)
    while True:
        logits = model(torch.tensor([seq])).logits[:, -1]
        u = None if uniforms is None else uniforms[n_policy : n_policy + 1]
        token = int(pick_tokens(logits, u, *sampling)[0])
        seq, ids, owners, turn, n_policy = (
            seq + [token],
            ids + [token],
            owners + ["policy"],
            turn + [token],
            n_policy + 1,
        )
        end = fmt.turn_end(tok.decode(turn, skip_special_tokens=True), token in eos_ids)
        if end is None and len(turn) < limits.max_turn_tokens and len(ids) < limits.max_episode_tokens:
            continue
        turns += 1
        if end is None or end.kind == ANSWER or end.kind != CALL or turns >= limits.max_turns:
            return ids, owners
        if len(ids) >= limits.max_episode_tokens:
            return ids, owners
        result = tok.encode(fmt.render(env.run(end.call)), add_special_tokens=False)
        result = result[: limits.max_episode_tokens - len(ids)]
        seq, ids, owners, turn = seq + result, ids + result, owners + ["environment"] * len(result), []
        if len(ids) >= limits.max_episode_tokens:
            return ids, owners


def taught_inputs(root):
    """A train_grpo input tree under `root`: policy/ (a tiny Llama taught the demonstrations, with its tokenizer)
    and data/ (the demonstrations' questions as train and held-out prompts)."""
    tok = chat_tokenizer()
    teach(tiny_llama(tok, hidden=64), tok).save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    write_jsonl(root / "data" / "rl_prompts_train.jsonl", question_rows())
    write_jsonl(root / "data" / "rl_prompts_heldout.jsonl", question_rows())
    return root
