"""The training loop shared by every objective (cross-entropy, SCST).

The loop knows nothing about the loss: an *objective* maps ``(model, batch)`` to ``(loss, logs)``; nor
about the task, its config or its vocabularies: a *validator* maps the model to metrics (the
``selection_metric`` among them picks the ``best`` checkpoint, higher is better) and checkpoints are
written by a :data:`CheckpointWriter` callback. It owns the data order, the learning-rate schedule,
gradient averaging/clipping, validation, the choice of best/last checkpoints, early stopping (``patience``:
the stage ends after that many validated epochs without a better selection metric, as the released M2
``train.py`` does with 5) and resuming.

Reproducible resume: every epoch's order is a permutation drawn from ``seed + epoch`` (independent of
the global RNG), DataLoader worker seeds come from a dedicated generator, validation runs under
``torch.random.fork_rng``, and a checkpoint stores optimizer state, the torch/CUDA/Python RNG states and
the position inside the epoch. Resuming from a checkpoint therefore replays exactly the batches and
dropout masks an uninterrupted run would have seen (the tests check bit-identical weights).

The position inside an epoch is counted in samples of the epoch's permutation, not in batches: a run resumed
with another ``batch_size`` (or number of ranks) cuts the rest of the permutation into batches of the new size,
so every sample of the epoch is seen once. SIGINT/SIGTERM stop the run at the next step boundary with a
``last`` checkpoint (:mod:`vlattn.training.signals`).
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm import tqdm

from vlattn.data.handover import SharedBatches
from vlattn.data.regions import BatchReadahead, ReadaheadBatches, batch_to_device
from vlattn.errors import TrainingDiverged, TrainingInterrupted, VlattnError
from vlattn.precision import Precision, autocast, grad_scaler
from vlattn.training.distributed import DistContext, average_gradients, broadcast_int, max_over_ranks
from vlattn.training.logging import RunLog
from vlattn.training.schedules import Schedule
from vlattn.training.signals import StopSignals, ignore_stop_signals

LOG = logging.getLogger("vlattn.training")

Batch = dict[str, Any]
Objective = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, dict[str, float]]]
"""``(model, batch) -> (loss, logs)``; an objective with a ``set_epoch(epoch)`` method is told each epoch (0-based)
before its first step, on a resumed run too (LXMERT's pretraining adds its QA loss from a given epoch)."""
Validator = Callable[[torch.nn.Module], dict[str, float]]
CheckpointWriter = Callable[[str, dict[str, Any]], None]
"""``write(name, train_state)``: save the model with ``train_state`` as checkpoint ``name`` (``last``/``best``)."""


def epoch_order(
    num_items: int, batch_size: int, *, seed: int, epoch: int, lengths: Sequence[int] | None = None,
    length_buckets: int = 0,
) -> list[int]:
    """The order of an epoch's samples: a permutation drawn from ``(seed, epoch)`` only.

    ``length_buckets`` > 0 (with the items' ``lengths``): the permutation is cut into pools of ``length_buckets``
    batches, each pool is sorted by length (stable: equal lengths keep the permutation's order) and cut into
    batches of ``batch_size``, and the full batches are shuffled (by the same generator) with the one short
    batch, if any, kept last. So consecutive ``batch_size`` samples of the order have similar lengths (less
    padding), while which samples meet in a batch and the batches' order stay random.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(num_items, generator=generator).tolist()
    if length_buckets <= 0:
        return order
    if lengths is None or len(lengths) != num_items:
        raise ValueError(f"length_buckets needs one length per item ({num_items})")
    pool = batch_size * length_buckets
    batches: list[list[int]] = []
    for begin in range(0, num_items, pool):
        ranked = sorted(order[begin : begin + pool], key=lengths.__getitem__)
        batches += [ranked[i : i + batch_size] for i in range(0, len(ranked), batch_size)]
    short = batches.pop() if len(batches[-1]) < batch_size else []  # only the last pool's last batch can be short
    shuffled = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return [index for batch in shuffled for index in batch] + short


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of an epoch's order (:func:`epoch_order`), sharded over ranks, starting ``start`` samples into it.

    The order depends only on ``(seed, epoch)`` (and, with ``length_buckets``, the items' ``lengths`` and
    ``order_batch_size``, the batch size the epoch's order was made for: a run resumed mid-epoch with another
    batch size keeps its epoch's order); its part from ``start`` on is cut into global batches of ``batch_size``;
    rank ``r`` of ``w`` takes batches ``r, r + w, ...``, so all ranks step the same number of times (the last
    ``< w`` batches of an epoch are left out). ``ends[k]``: the position in the order (in samples) after step
    ``k`` of this sampler, the same on every rank.
    """

    def __init__(
        self, num_items: int, batch_size: int, *, seed: int, epoch: int, start: int = 0, ctx: DistContext = DistContext(),
        lengths: Sequence[int] | None = None, length_buckets: int = 0, order_batch_size: int = 0,
    ) -> None:
        order = epoch_order(num_items, order_batch_size or batch_size, seed=seed, epoch=epoch, lengths=lengths,
                            length_buckets=length_buckets)[start:]
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        usable = len(batches) - len(batches) % ctx.world_size
        steps = [batches[k : k + ctx.world_size] for k in range(0, usable, ctx.world_size)]
        self.batches = [step[ctx.rank] for step in steps]
        self.ends = list(itertools.accumulate((sum(map(len, step)) for step in steps), initial=start))[1:]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@dataclass
class LoopOptions:
    """Settings of one training stage."""

    stage: str
    epochs: int
    batch_size: int
    seed: int
    selection_metric: str  # the validation metric that picks the best checkpoint (higher is better)
    grad_clip: float = 0.0
    log_every: int = 50
    checkpoint_every: int = 0
    max_steps: int = 0
    num_workers: int = 0
    patience: int = 0  # stop after this many epochs without a better selection metric (0: never)
    precision: Precision = "fp32"  # autocast of training steps and validation (vlattn/precision.py)
    length_buckets: int = 0  # > 0: batches of similar lengths (epoch_order); the dataset must offer lengths()


@dataclass
class LoopState:
    """Counters carried across a resume: the epoch, the position in its permutation (samples, all ranks
    together), the optimiser step, the best validation score, and the number of records in the run log
    (``metrics.jsonl``) when the state was saved."""

    epoch: int = 0
    sample_in_epoch: int = 0
    step: int = 0
    best_score: float = -math.inf
    log_records: int = 0
    stale_epochs: int = 0  # validated epochs since the best one
    order_batch_size: int = 0  # the batch size the current epoch's order was made for (0: not yet made)

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "sample_in_epoch": self.sample_in_epoch, "step": self.step,
                "best_score": self.best_score, "log_records": self.log_records, "stale_epochs": self.stale_epochs,
                "order_batch_size": self.order_batch_size}

    @classmethod
    def from_dict(cls, loop: dict[str, Any]) -> LoopState:
        """The state saved by :meth:`to_dict`."""
        return cls(int(loop["epoch"]), int(loop["sample_in_epoch"]), int(loop["step"]), float(loop["best_score"]),
                   int(loop["log_records"]), int(loop.get("stale_epochs", 0)),
                   int(loop.get("order_batch_size", 0)))


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value: Any) -> Any:
    """``random.setstate`` wants nested tuples; a reloaded state may hold lists."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


class Trainer:
    """Runs one stage of training; records go to the :class:`RunLog` given to :meth:`fit`, checkpoints ``last``
    (every epoch, every ``checkpoint_every`` steps and when stopped by a signal) and ``best`` (best
    ``selection_metric``) to ``write_checkpoint``."""

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: Schedule,
        objective: Objective,
        dataset: Dataset,
        collate: Callable[[list[Any]], Batch],
        validate: Validator | None,
        write_checkpoint: CheckpointWriter,
        options: LoopOptions,
        device: torch.device = torch.device("cpu"),
        ctx: DistContext = DistContext(),
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule
        self.objective = objective
        self.dataset = dataset
        self.collate = collate
        self.validate = validate
        self.write_checkpoint = write_checkpoint
        self.options = options
        self.device = device
        self.ctx = ctx
        self.state = LoopState()
        self.scaler = grad_scaler(options.precision, device)
        self.log = RunLog("", enabled=False)  # replaced by the run's log in fit()
        self._saved_at: tuple[int, int, int] | None = None
        self._lengths: Sequence[int] | None = None
        if options.length_buckets > 0:
            lengths = getattr(dataset, "lengths", None)
            if lengths is None:
                raise VlattnError(f"stage {options.stage!r}: length_buckets needs a dataset with lengths()")
            self._lengths = lengths()

    # --- checkpoints -------------------------------------------------------------------------
    def _train_state(self) -> dict[str, Any]:
        self.state.log_records = self.log.records
        return {
            "stage": self.options.stage,
            "loop": self.state.to_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": _rng_state(),
            **({"scaler": self.scaler.state_dict()} if self.scaler.is_enabled() else {}),
        }

    def save(self, name: str) -> None:
        """Write checkpoint ``name`` with the full training state (rank 0 only)."""
        if self.ctx.is_main:
            self.write_checkpoint(name, self._train_state())
        self._saved_at = (self.state.epoch, self.state.sample_in_epoch, self.state.step)

    def restore(self, train_state: dict[str, Any]) -> None:
        """Continue from a saved training state (the model weights are loaded by the caller). The optimizer's
        state (moments, step counts) comes from ``train_state``; its hyper-parameters (betas, weight decay)
        stay those it was built with, so a resumed run uses the settings it is given. The position inside the
        epoch is kept in samples, so another batch size continues where the saved run stopped."""
        if train_state.get("stage") != self.options.stage:
            raise VlattnError(
                f"cannot resume stage {self.options.stage!r} from a checkpoint of stage {train_state.get('stage')!r}"
            )
        try:
            self.state = LoopState.from_dict(train_state["loop"])
        except (KeyError, TypeError, ValueError) as err:
            raise VlattnError(f"cannot resume: the checkpoint's training state has no valid loop counters "
                              f"(missing or bad {err})") from None
        settings = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        try:
            self.optimizer.load_state_dict(train_state["optimizer"])
        except ValueError as err:  # the parameter groups differ
            raise VlattnError(f"cannot resume: the checkpoint's optimizer does not match this one ({err}); "
                              "was weight decay switched on or off?") from None
        for group, values in zip(self.optimizer.param_groups, settings):
            group.update(values)
        _set_rng_state(train_state["rng"])
        if self.scaler.is_enabled() and "scaler" in train_state:
            self.scaler.load_state_dict(train_state["scaler"])

    # --- the loop ----------------------------------------------------------------------------
    def _loader(self, epoch: int, start: int) -> tuple[DataLoader, EpochBatchSampler]:
        if start == 0 or not self.state.order_batch_size:
            self.state.order_batch_size = self.options.batch_size
        sampler = EpochBatchSampler(
            len(self.dataset), self.options.batch_size, seed=self.options.seed, epoch=epoch, start=start, ctx=self.ctx,
            lengths=self._lengths, length_buckets=self.options.length_buckets,
            order_batch_size=self.state.order_batch_size,
        )
        worker_seed = torch.Generator().manual_seed(self.options.seed + epoch)
        batches = ReadaheadBatches(sampler, self.dataset) if isinstance(self.dataset, BatchReadahead) else sampler
        loader = DataLoader(
            self.dataset,
            batch_sampler=batches,
            collate_fn=SharedBatches(self.collate) if self.options.num_workers > 0 else self.collate,
            num_workers=self.options.num_workers,
            generator=worker_seed,
            pin_memory=self.device.type == "cuda",
            worker_init_fn=ignore_stop_signals if self.options.num_workers > 0 else None,
        )
        return loader, sampler

    def _step(self, batch: Batch) -> dict[str, float]:
        lr = self.schedule.lr_at(self.state.step, self.state.epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        with autocast(self.options.precision, self.device):
            loss, logs = self.objective(self.model, batch_to_device(batch, self.device))
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"stage {self.options.stage!r}: the loss is {loss.item()} at step {self.state.step} (epoch "
                f"{self.state.epoch + 1}); nothing of this step was saved, the run's checkpoints are those of earlier "
                "steps; lower the learning rate (train.schedule) or clip gradients (train.grad_clip)")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        average_gradients(self.model, self.ctx)
        if self.options.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            logs["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.grad_clip))
        self.scaler.step(self.optimizer)  # (fp16: skipped when the scaled gradients overflowed)
        self.scaler.update()
        self.state.step += 1
        return {"loss": float(loss.detach()), "lr": lr, **logs}

    def _end_epoch(self, complete: bool = True) -> dict[str, float]:
        """Validate, then save ``best`` (if better) and ``last``. ``complete``: the epoch's order was gone through
        (else a ``max_steps`` stop inside it: the position in the epoch is kept, so a resumed run with a higher
        ``max_steps`` goes on from there, and patience does not count it)."""
        metrics: dict[str, float] = {}
        if self.validate is not None and self.ctx.is_main:
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                self.model.eval()
                with torch.no_grad(), autocast(self.options.precision, self.device):
                    metrics = self.validate(self.model)
            self.log.write("val", self.state.step, epoch=self.state.epoch, stage=self.options.stage, **metrics)
        if metrics and self.options.selection_metric not in metrics:
            raise KeyError(f"validation gave no {self.options.selection_metric!r} (the selection metric); got {sorted(metrics)}")
        score = metrics.get(self.options.selection_metric, -math.inf)
        improved = score > self.state.best_score
        if improved:
            self.state.best_score = score
        if complete:
            stale = 0 if improved else self.state.stale_epochs + 1
            self.state.stale_epochs = broadcast_int(stale, self.ctx, self.device)  # rank 0 validated
            self.state.epoch += 1
            self.state.sample_in_epoch = 0
        if improved:  # before ``last``: a crash between the two leaves ``last`` at the previous state, so the
            self.save("best")  # resumed run validates this epoch again and writes ``best`` then
        self.save("last")
        return metrics

    def _done(self) -> bool:
        return self.options.max_steps > 0 and self.state.step >= self.options.max_steps

    def _out_of_patience(self) -> bool:
        return 0 < self.options.patience <= self.state.stale_epochs

    def _stop_if_signalled(self, signals: StopSignals) -> None:
        """At a step boundary: if any rank got SIGINT/SIGTERM, save ``last`` (unless just saved) and stop."""
        signum = max_over_ranks(signals.signum, self.ctx, self.device)
        if not signum:
            return
        if self._saved_at != (self.state.epoch, self.state.sample_in_epoch, self.state.step):
            self.save("last")
        raise TrainingInterrupted(signum, saved=True, step=self.state.step, epoch=self.state.epoch)

    def fit(self, log: RunLog) -> dict[str, float]:
        """Train until ``epochs`` are done, logging to ``log``; returns the last validation metrics.

        ``max_steps`` (> 0) ends the run early: the model is validated and saved as ``last``/``best`` where it
        stops, which keeps quick runs usable, and the position inside the epoch is kept (a resumed run with a
        higher ``max_steps`` continues from there). SIGINT/SIGTERM save ``last`` at the next step boundary and
        raise :class:`~vlattn.errors.TrainingInterrupted`. A run with nothing left to train says why on stderr.
        """
        self.log = log
        last_metrics: dict[str, float] = {}
        quiet = not sys.stderr.isatty() or not self.ctx.is_main
        if self._done() and self.ctx.is_main:
            LOG.warning("nothing to train: step %d has reached train.max_steps=%d (raise it with --set "
                        "train.max_steps=N, or 0 for no limit)", self.state.step, self.options.max_steps)
        elif self.state.epoch >= self.options.epochs and self.ctx.is_main:
            LOG.warning("nothing to train: all %d epochs of stage %s are done (raise the stage's epochs with --set, "
                        "e.g. train.epochs=N)", self.options.epochs, self.options.stage)
        try:
            with StopSignals() as signals:
                while self.state.epoch < self.options.epochs and not self._done() and not self._out_of_patience():
                    self._stop_if_signalled(signals)
                    set_epoch = getattr(self.objective, "set_epoch", None)  # an objective that changes over epochs
                    if set_epoch is not None:
                        set_epoch(self.state.epoch)
                    loader, sampler = self._loader(self.state.epoch, self.state.sample_in_epoch)
                    bar = tqdm(loader, desc=f"{self.options.stage} epoch {self.state.epoch + 1}/{self.options.epochs}",
                               disable=quiet)
                    for index, batch in enumerate(bar):
                        logs = self._step(batch)
                        self.state.sample_in_epoch = sampler.ends[index]
                        bar.set_postfix(loss=f"{logs['loss']:.3f}", lr=f"{logs['lr']:.2e}")
                        if self.state.step % self.options.log_every == 0:
                            self.log.write("train", self.state.step, epoch=self.state.epoch, stage=self.options.stage, **logs)
                        if self.options.checkpoint_every and self.state.step % self.options.checkpoint_every == 0:
                            self.save("last")
                        if self._done():
                            break
                        self._stop_if_signalled(signals)
                    del bar, loader  # its workers and the slots kept mapped for them go before validation
                    last_metrics = self._end_epoch(complete=self.state.sample_in_epoch == sampler.ends[-1]
                                                   if sampler.ends else True)
            if self._out_of_patience():
                self.log.write("stop", self.state.step, epoch=self.state.epoch, stage=self.options.stage,
                               reason=f"no better {self.options.selection_metric} for {self.state.stale_epochs} epochs")
        finally:
            self.log.close()
        return last_metrics
