"""The reward trainer's fast paths give what the plain ones give, on the same batch, to float tolerance:
chosen and rejected in one forward vs two; length-bucketed padding (train.length_buckets) vs one padded
batch, under either padding side, for the outputs, the per-pair losses and the gradients; the chunk boundaries
(train.bucket_pass_cost) against an exhaustive search; the fused AdamW step vs the plain one; and whole
training runs with and without buckets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from support.models import build_reward, save_tiny_base

from prefpipe.reward.collate import chunk_bounds
from prefpipe.reward.pairs import Pair
from prefpipe.reward.train_setup import length_buckets_for, make_optimizer, param_groups, to_device
from prefpipe.reward.trainer import RewardTrainer

WORDS = ["red", "blue", "green", "stone", "river", "cloud", "apple", "seven"]
HEADS = ("bt", "gpm", "bgpm")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("fast_paths_base"))


def mixed_pairs(n: int = 12) -> list[Pair]:
    """Pairs whose sides differ widely in length (1 to 18 words), so padding differs between the paths."""
    out = []
    for i in range(n):
        chosen = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (5 * i) % 18))
        rejected = " ".join(WORDS[(2 * i + j) % len(WORDS)] for j in range(1 + (7 * i + 3) % 18))
        out.append(
            Pair(f"p{i}", f"say {WORDS[i % len(WORDS)]}" + " please" * (i % 3), chosen, rejected, "all")
        )
    return out


def rows_of(rm, pairs):
    enc = rm.encoder
    chosen = enc.tokenize_many([p.prompt for p in pairs], [p.chosen for p in pairs])
    rejected = enc.tokenize_many([p.prompt for p in pairs], [p.rejected for p in pairs])
    return chosen, rejected


def per_pair_loss(rm, out: dict[str, torch.Tensor], n: int) -> torch.Tensor:
    score = rm.head.training_score({k: v[:n] for k, v in out.items()}, {k: v[n:] for k, v in out.items()})
    return -F.logsigmoid(score / rm.tau)


def assert_close_outputs(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_one_forward_of_chosen_and_rejected_equals_two(tiny_base, head, side):
    rm, _ = build_reward(tiny_base, head, data={"padding_side": side})
    rm.eval()  # the Bayesian head samples in train mode; the backbone is the same either way (no dropout)
    chosen, rejected = rows_of(rm, mixed_pairs())
    n = len(chosen)
    with torch.no_grad():
        joint = rm(**rm.encoder.pad(chosen + rejected))
        two = [rm(**rm.encoder.pad(chosen)), rm(**rm.encoder.pad(rejected))]
    separate = {k: torch.cat([two[0][k], two[1][k]]) for k in joint}
    assert_close_outputs(joint, separate)
    torch.testing.assert_close(per_pair_loss(rm, joint, n), per_pair_loss(rm, separate, n))


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("buckets", [2, 5, 8, 100])
def test_bucketed_padding_gives_the_same_outputs_losses_and_gradients(tiny_base, head, side, buckets):
    rm, _ = build_reward(tiny_base, head, data={"padding_side": side})
    rm.eval()
    chosen, rejected = rows_of(rm, mixed_pairs())
    rows, n = chosen + rejected, len(chosen)
    plain_batch = rm.encoder.pad(rows)
    bucketed = rm.encoder.pad_buckets(rows, buckets, 0)  # cost 0: every allowed chunk is used
    padded = sum(b["input_ids"].numel() for b in bucketed["buckets"])
    assert padded < plain_batch["input_ids"].numel()  # the point: less padding
    assert 1 < len(bucketed["buckets"]) <= min(buckets, len(rows))  # cost 0: no cut that saves nothing

    results = []
    for batch in (plain_batch, to_device(bucketed, torch.device("cpu"))):
        rm.zero_grad()
        out = rm(**batch)
        loss = per_pair_loss(rm, out, n)
        loss.mean().backward()
        grads = {name: p.grad.clone() for name, p in rm.named_parameters() if p.grad is not None}
        results.append((out, loss.detach(), grads))
    (out_a, loss_a, grads_a), (out_b, loss_b, grads_b) = results
    assert_close_outputs({k: v.detach() for k, v in out_a.items()}, {k: v.detach() for k, v in out_b.items()})
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-6)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(
            grads_a[name], grads_b[name], rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )


def exhaustive_chunks(lengths: list[int], max_chunks: int, pass_cost: int) -> tuple[int, int]:
    """(cost, chunks) of the best split by trying every set of cut points (independent of the DP)."""
    n, best = len(lengths), None
    for mask in range(1 << (n - 1)):
        bounds = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        k = len(bounds) - 1
        if k > max_chunks:
            continue
        cost = (
            sum((b - a) * max(lengths[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)) + pass_cost * k
        )
        if best is None or (cost, k) < best:
            best = (cost, k)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_chunks", [1, 2, 3, 8])
@pytest.mark.parametrize("pass_cost", [0, 5, 32, 1000])
def test_chunk_bounds_minimise_padded_tokens_plus_pass_cost(seed, max_chunks, pass_cost):
    g = torch.Generator().manual_seed(seed)
    lengths = sorted(torch.randint(1, 120, (11,), generator=g).tolist())
    bounds = chunk_bounds(lengths, max_chunks, pass_cost)
    assert bounds[0] == 0 and bounds[-1] == len(lengths) and bounds == sorted(set(bounds))
    k = len(bounds) - 1
    cost = sum((b - a) * lengths[b - 1] for a, b in zip(bounds, bounds[1:], strict=False)) + pass_cost * k
    assert (cost, k) == exhaustive_chunks(lengths, max_chunks, pass_cost)
    assert bounds == chunk_bounds(list(lengths), max_chunks, pass_cost)  # deterministic


def test_chunk_bounds_edge_cases():
    assert chunk_bounds([], 8, 32) == [0]
    assert chunk_bounds([7], 8, 0) == [0, 1]
    assert chunk_bounds([5, 5, 5, 5], 8, 0) == [0, 4]  # equal lengths: a cut saves nothing, so none
    assert chunk_bounds([2, 2, 100, 100], 8, 0) == [0, 2, 4]
    assert chunk_bounds([2, 2, 100, 100], 8, 196) == [0, 4]  # saves exactly 196 tokens: not worth it
    assert chunk_bounds([2, 2, 100, 100], 8, 195) == [0, 2, 4]


def test_bucketed_batch_with_a_pass_cost_uses_fewer_chunks(tiny_base):
    rm, settings = build_reward(tiny_base, "bt")
    assert settings.train.bucket_pass_cost == 32  # the config default reaches the settings
    chosen, rejected = rows_of(rm, mixed_pairs())
    rows = chosen + rejected
    free = rm.encoder.pad_buckets(rows, 8, 0)
    costly = rm.encoder.pad_buckets(rows, 8, 10_000)
    assert len(free["buckets"]) == 8 and len(costly["buckets"]) == 1
    assert torch.equal(
        costly["buckets"][0]["input_ids"],
        rm.encoder.pad(sorted(rows, key=lambda r: len(r.input_ids)))["input_ids"],
    )
    mid = rm.encoder.pad_buckets(rows, 8, settings.train.bucket_pass_cost)
    padded = [sum(b["input_ids"].numel() for b in x["buckets"]) for x in (free, mid, costly)]
    assert padded[0] <= padded[1] <= padded[2]
    assert 1 <= len(mid["buckets"]) <= 8


def test_fused_adamw_step_equals_the_plain_one(tiny_base):
    rm, settings = build_reward(tiny_base, "gpm", train={"weight_decay": 0.01, "head_learning_rate": 3e-2})
    acc = Accelerator(cpu=True)
    fast = make_optimizer(rm, settings, acc)
    assert fast.defaults["fused"] is True
    start = {k: v.clone() for k, v in rm.state_dict().items()}
    chosen, rejected = rows_of(rm, mixed_pairs())
    batch = rm.encoder.pad(chosen + rejected)

    def three_steps(opt):
        rm.load_state_dict(start)
        for _ in range(3):
            opt.zero_grad()
            per_pair_loss(rm, rm(**batch), len(chosen)).mean().backward()
            opt.step()
        return {k: v.clone() for k, v in rm.state_dict().items()}

    got = three_steps(fast)
    plain = torch.optim.AdamW(param_groups(rm, settings), lr=settings.train.learning_rate, foreach=False)
    want = three_steps(plain)
    # Adam divides by sqrt(v): where a gradient element is tiny, rounding moves an update by a few 1e-6 (3e-6
    # seen on a head weight of 0.03 at head lr 3e-2); a wrong update would be off by the learning rate.
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("head", ["bt", "gpm"])
def test_training_with_length_buckets_follows_the_plain_run(tiny_base, tmp_path, head):
    """Same batches (data order does not depend on buckets), same metrics step by step."""
    pairs = mixed_pairs(16)
    # small learning rates: the tiny test settings' 1e-2 throws BT's loss to ~30, where float noise grows fast
    train = {
        "steps": 3,
        "batch_size": 8,
        "micro_batch_size": 4,
        "learning_rate": 1e-4,
        "head_learning_rate": 1e-3,
    }
    histories = {}
    for k in (1, 8):
        rm, settings = build_reward(tiny_base, head, train={**train, "length_buckets": k})
        histories[k] = RewardTrainer(rm, settings, pairs, tmp_path / str(k)).train().history
    for ref, got in zip(histories[1], histories[8], strict=True):
        for key in ("loss", "grad_norm", "prob", "accuracy"):
            tol = 1e-4 if ref["step"] == 1 else 1e-3  # float32 summation order; later: amplified by Adam
            assert got[key] == pytest.approx(ref[key], rel=tol, abs=1e-6), (ref["step"], key)


def test_bucketed_training_is_deterministic(tiny_base, tmp_path):
    """Same seed, same settings (default length_buckets and bucket_pass_cost): bit-identical weights."""
    train = {"steps": 3, "batch_size": 8, "micro_batch_size": 8}
    weights = []
    for run in ("a", "b"):
        rm, settings = build_reward(tiny_base, "gpm", train=train)
        RewardTrainer(rm, settings, mixed_pairs(16), tmp_path / run).train()
        weights.append({k: v.clone() for k, v in rm.state_dict().items()})
    assert weights[0].keys() == weights[1].keys()
    for k in weights[0]:
        assert torch.equal(weights[0][k], weights[1][k]), k


def test_a_cuda_device_takes_the_cuda_length_buckets(tiny_base):
    """On CUDA a pass costs far more than padding (benchmarks/gpu_buckets.py): cuda_length_buckets there,
    the CPU-tuned length_buckets elsewhere. Both come from the config, neither is hard-coded."""
    _, settings = build_reward(tiny_base, "bt", train={"length_buckets": 6, "cuda_length_buckets": 2})
    assert length_buckets_for(torch.device("cuda", 0), settings.train) == 2
    assert length_buckets_for(torch.device("cpu"), settings.train) == 6
