"""The position inside an epoch is kept in samples: a run resumed with another batch size (or number of ranks)
sees every sample of the epoch exactly once; states saved when it was counted in batches still resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from vlattn.errors import VlattnError
from vlattn.training.distributed import DistContext
from vlattn.training.logging import RunLog
from vlattn.training.loop import EpochBatchSampler, LoopOptions, Trainer
from vlattn.training.optim import build_optimizer
from vlattn.training.schedules import Constant

ITEMS = 23  # not a multiple of any batch size used: the last batch of an epoch is short


class Stop(RuntimeError):
    pass


def trainer(batch_size: int, seen: list[int], saved: dict, *, stop_after: int = 0, epochs: int = 2) -> Trainer:
    """A trainer over items 0..22 whose objective records the items of every batch (and fails at step
    ``stop_after``, after a checkpoint was written at the previous step)."""
    torch.manual_seed(0)
    model = nn.Linear(1, 1)

    def objective(m: nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        if stop_after and len(saved.get("calls", [])) + 1 == stop_after:
            raise Stop()
        saved.setdefault("calls", []).append(1)
        seen.extend(int(x) for x in batch["x"])
        return m(batch["x"].float().unsqueeze(1)).sum(), {}

    return Trainer(
        model=model, optimizer=build_optimizer(model, (0.9, 0.98), 0.0), schedule=Constant(1e-3), objective=objective,
        dataset=list(range(ITEMS)), collate=lambda rows: {"x": torch.tensor(rows)}, validate=None,
        write_checkpoint=lambda name, state: saved.update({name: state}),
        options=LoopOptions(stage="s", epochs=epochs, batch_size=batch_size, seed=3, selection_metric="m",
                            checkpoint_every=1),
    )


@pytest.mark.parametrize("old, new", [(4, 5), (5, 4), (4, 16), (3, 1)])
def test_resume_with_another_batch_size_sees_every_sample_once(old: int, new: int, tmp_path: Path) -> None:
    seen: list[int] = []
    saved: dict = {}
    with pytest.raises(Stop):  # stop in the middle of epoch 1, after 3 steps (checkpoint at each step)
        trainer(old, seen, saved, stop_after=4).fit(RunLog(tmp_path))
    state = saved["last"]
    assert state["loop"]["sample_in_epoch"] == 3 * old and len(seen) == 3 * old
    resumed = trainer(new, seen, {})
    resumed.restore(state)
    resumed.fit(RunLog(tmp_path, keep=state["loop"]["log_records"]))
    first_epoch, second_epoch = Counter(seen[:ITEMS]), Counter(seen[ITEMS:])
    assert first_epoch == Counter(range(ITEMS)) and second_epoch == Counter(range(ITEMS))
    # epoch 1 went on in the order of its permutation (batches of one item are the permutation itself) ...
    assert seen[:ITEMS] == [batch[0] for batch in EpochBatchSampler(ITEMS, 1, seed=3, epoch=0).batches]
    # ... in batches of the new size: ceil(rest / new) steps, then ceil(23 / new) for epoch 2
    assert resumed.state.step == 3 + -(-(ITEMS - 3 * old) // new) + -(-ITEMS // new)


def test_positions_are_global_across_ranks() -> None:
    order = [b[0] for b in EpochBatchSampler(40, 1, seed=3, epoch=1).batches]
    ranks = [EpochBatchSampler(40, 3, seed=3, epoch=1, start=7, ctx=DistContext(r, 2)) for r in (0, 1)]
    assert ranks[0].ends == ranks[1].ends == [13, 19, 25, 31, 37]  # two batches of 3 per step, from sample 7
    # step k of rank 0 and rank 1 together take the next 6 samples of the permutation, disjointly
    for k, end in enumerate(ranks[0].ends):
        taken = ranks[0].batches[k] + ranks[1].batches[k]
        assert sorted(taken) == sorted(order[end - 6 : end])
    # the 3 samples after 37 make one batch, which one rank alone cannot take: left out as before


def test_a_state_counting_batches_instead_of_samples_is_refused(tmp_path: Path) -> None:
    """``batch_in_epoch`` counted the position during development only: such a state is a one-line error."""
    saved: dict = {}
    trainer(4, [], saved, epochs=1).fit(RunLog(tmp_path))
    state = saved["last"]
    state["loop"] = {"epoch": 0, "batch_in_epoch": 2, "step": 2, "best_score": float("-inf")}
    with pytest.raises(VlattnError, match="cannot resume: the checkpoint's training state has no valid loop "
                                          "counters \\(missing or bad 'sample_in_epoch'\\)"):
        trainer(5, [], {}, epochs=1).restore(state)
