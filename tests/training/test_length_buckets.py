"""``train.length_buckets``: batches of captions of similar length, in a random order that depends only on the
seed and the epoch, so a resumed run replays the same batches."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from vlattn import tasks
from vlattn.errors import VlattnError
from vlattn.training.logging import RunLog
from vlattn.training.loop import EpochBatchSampler, LoopOptions, Trainer, epoch_order
from vlattn.training.optim import build_optimizer
from vlattn.training.schedules import Constant
from tests.training.conftest import Crash, crash_at_step, tiny_config

LENGTHS = [(7 * i) % 13 + 1 for i in range(103)]  # 1..13, scattered; 103 items: the last batch of 5 is short


def batches_of(order: list[int], size: int) -> list[list[int]]:
    return [order[i : i + size] for i in range(0, len(order), size)]


def test_batches_are_a_permutation_of_sorted_runs_of_each_pool() -> None:
    order = epoch_order(103, 5, seed=4, epoch=2, lengths=LENGTHS, length_buckets=4)
    assert sorted(order) == list(range(103))
    # the pools: consecutive runs of 4 x 5 = 20 items of the epoch's plain permutation
    plain = torch.randperm(103, generator=torch.Generator().manual_seed(4 * 1_000_003 + 2)).tolist()
    pools = [set(plain[i : i + 20]) for i in range(0, 103, 20)]
    batches = batches_of(order, 5)
    assert [len(b) for b in batches] == [5] * 20 + [3]  # the one short batch (the last pool's rest) comes last
    for pool in pools:
        mine = sorted((b for b in batches if set(b) & pool), key=lambda b: min(LENGTHS[i] for i in b))
        assert all(set(b) <= pool for b in mine)  # a batch never mixes pools
        # sorted runs: a batch's longest caption is no longer than the next batch's shortest
        for first, second in zip(mine, mine[1:]):
            assert max(LENGTHS[i] for i in first) <= min(LENGTHS[i] for i in second)
    # less padding than the plain permutation's batches (each batch padded to its longest caption)
    padded = lambda o: sum(len(b) * max(LENGTHS[i] for i in b) for b in batches_of(o, 5))  # noqa: E731
    assert padded(order) < padded(plain)
    # batches are shuffled: the pools' batches do not come pool by pool
    assert [next(p for p, pool in enumerate(pools) if b[0] in pool) for b in batches[:5]] != [0] * 5


def test_order_is_deterministic_per_seed_and_epoch() -> None:
    def make(seed: int, epoch: int) -> list[int]:
        return epoch_order(103, 5, seed=seed, epoch=epoch, lengths=LENGTHS, length_buckets=4)

    assert make(1, 0) == make(1, 0)
    assert make(1, 0) != make(1, 1) and make(1, 0) != make(2, 0)


def test_equal_lengths_keep_the_permutation_inside_batches() -> None:
    plain = epoch_order(40, 4, seed=3, epoch=1)
    bucketed = epoch_order(40, 4, seed=3, epoch=1, lengths=[5] * 40, length_buckets=2)
    # a stable sort of equal lengths changes nothing: the same batches, shuffled
    assert sorted(map(tuple, batches_of(bucketed, 4))) == sorted(map(tuple, batches_of(plain, 4)))
    assert epoch_order(40, 4, seed=3, epoch=1, lengths=[5] * 40, length_buckets=0) == plain


def test_missing_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one length per item"):
        epoch_order(10, 2, seed=0, epoch=0, length_buckets=2)


class Items(list):
    """Items 0..n-1 with lengths()."""

    def lengths(self) -> list[int]:
        return [LENGTHS[i] for i in self]


class Stop(RuntimeError):
    pass


def trainer(batch_size: int, seen: list[int], saved: dict, dataset: list, stop_after: int = 0) -> Trainer:
    model = nn.Linear(1, 1)

    def objective(m: nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        if stop_after and len(seen) // batch_size + 1 == stop_after:
            raise Stop()
        seen.extend(int(x) for x in batch["x"])
        return m(batch["x"].float().unsqueeze(1)).sum(), {}

    return Trainer(
        model=model, optimizer=build_optimizer(model, (0.9, 0.98), 0.0), schedule=Constant(1e-3), objective=objective,
        dataset=dataset, collate=lambda rows: {"x": torch.tensor(rows)}, validate=None,
        write_checkpoint=lambda name, state: saved.update({name: state}),
        options=LoopOptions(stage="s", epochs=1, batch_size=batch_size, seed=3, selection_metric="m",
                            checkpoint_every=1, length_buckets=3),
    )


def test_resume_with_another_batch_size_keeps_the_epochs_order(tmp_path: Path) -> None:
    seen: list[int] = []
    saved: dict = {}
    with pytest.raises(Stop):  # 4 steps of 5, then stopped
        trainer(5, seen, saved, Items(range(103)), stop_after=5).fit(RunLog(tmp_path))
    state = saved["last"]
    assert state["loop"]["sample_in_epoch"] == 20 and state["loop"]["order_batch_size"] == 5
    resumed = trainer(7, seen, {}, Items(range(103)))
    resumed.restore(state)
    resumed.fit(RunLog(tmp_path, keep=state["loop"]["log_records"]))
    assert Counter(seen) == Counter(range(103))  # every sample once
    assert seen == epoch_order(103, 5, seed=3, epoch=0, lengths=LENGTHS, length_buckets=3)  # the epoch's order
    assert EpochBatchSampler(103, 7, seed=3, epoch=0, start=20, lengths=LENGTHS, length_buckets=3,
                             order_batch_size=5).batches[0] == seen[20:27]


def test_a_dataset_without_lengths_is_refused() -> None:
    with pytest.raises(VlattnError, match="length_buckets needs a dataset with lengths"):
        trainer(5, [], {}, list(range(10)))


def test_bucketed_xe_resume_after_crash_reaches_identical_weights(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, "train.checkpoint_every=3", "train.epochs=3", "train.length_buckets=2")
    tasks.train(cfg, tmp_path / "straight", device="cpu")
    with crash_at_step(8), pytest.raises(Crash):  # mid-epoch 2, after the step-6 checkpoint
        tasks.train(cfg, tmp_path / "crashed", device="cpu")
    tasks.train(cfg, tmp_path / "crashed", resume=True, device="cpu")
    straight = load_file(str(tmp_path / "straight" / "checkpoints" / "last" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "crashed" / "checkpoints" / "last" / "model.safetensors"))
    assert all(torch.equal(straight[key], resumed[key]) for key in straight)
    tasks.train(tiny_config(tiny_data, "train.epochs=3"), tmp_path / "plain", device="cpu")
    plain = load_file(str(tmp_path / "plain" / "checkpoints" / "last" / "model.safetensors"))
    assert not all(torch.equal(straight[key], plain[key]) for key in straight)  # the option changed the batches


def test_xe_loss_with_a_fixed_divisor_weighs_every_token_alike() -> None:
    from vlattn.training.xe import xe_loss

    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])  # 3 real tokens, pad 0
    log_p = logits.log_softmax(-1)
    total = -(log_p[0, 0, 1] + log_p[0, 1, 2] + log_p[1, 0, 3])
    assert torch.allclose(xe_loss(logits, targets), total / 3)
    assert torch.allclose(xe_loss(logits, targets, tokens_per_batch=8.0), total / 8)
