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
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm import tqdm

from vlattn.errors import VlattnError
from vlattn.training.distributed import DistContext, average_gradients, broadcast_int
from vlattn.training.logging import RunLog
from vlattn.training.schedules import Schedule

Batch = dict[str, Any]
Objective = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, dict[str, float]]]
Validator = Callable[[torch.nn.Module], dict[str, float]]
CheckpointWriter = Callable[[str, dict[str, Any]], None]
"""``write(name, train_state)``: save the model with ``train_state`` as checkpoint ``name`` (``last``/``best``)."""


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of a seeded per-epoch permutation, sharded over ranks, optionally skipping a prefix.

    The permutation depends only on ``(seed, epoch)``; rank ``r`` of ``w`` takes batches
    ``r, r + w, ...`` of the global batch list, so all ranks step the same number of times.
    """

    def __init__(
        self, num_items: int, batch_size: int, *, seed: int, epoch: int, skip: int = 0, ctx: DistContext = DistContext()
    ) -> None:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(num_items, generator=generator).tolist()
        batches = [order[i : i + batch_size] for i in range(0, num_items, batch_size)]
        usable = len(batches) - len(batches) % ctx.world_size
        self.batches = batches[:usable][ctx.rank :: ctx.world_size][skip:]

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


@dataclass
class LoopState:
    """Counters carried across a resume."""

    epoch: int = 0
    batch_in_epoch: int = 0
    step: int = 0
    best_score: float = -math.inf
    stale_epochs: int = 0  # validated epochs since the best one

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "step": self.step,
                "best_score": self.best_score, "stale_epochs": self.stale_epochs}


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


def _to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


class Trainer:
    """Runs one stage of training; logs go to ``run_dir/metrics.jsonl``, checkpoints ``last`` (every epoch and
    every ``checkpoint_every`` steps) and ``best`` (best ``selection_metric``) to ``write_checkpoint``."""

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
        run_dir: str | Path,
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
        self.run_dir = Path(run_dir)
        self.write_checkpoint = write_checkpoint
        self.options = options
        self.device = device
        self.ctx = ctx
        self.state = LoopState()
        self.log = RunLog(self.run_dir, enabled=ctx.is_main)

    # --- checkpoints -------------------------------------------------------------------------
    def _train_state(self) -> dict[str, Any]:
        return {
            "stage": self.options.stage,
            "loop": self.state.to_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": _rng_state(),
        }

    def save(self, name: str) -> None:
        """Write checkpoint ``name`` with the full training state (rank 0 only)."""
        if self.ctx.is_main:
            self.write_checkpoint(name, self._train_state())

    def restore(self, train_state: dict[str, Any]) -> None:
        """Continue from a saved training state (the model weights are loaded by the caller). The optimizer's
        state (moments, step counts) comes from ``train_state``; its hyper-parameters (betas, weight decay)
        stay those it was built with, so a resumed run uses the settings it is given."""
        if train_state.get("stage") != self.options.stage:
            raise VlattnError(
                f"cannot resume stage {self.options.stage!r} from a checkpoint of stage {train_state.get('stage')!r}"
            )
        loop = train_state["loop"]
        self.state = LoopState(int(loop["epoch"]), int(loop["batch_in_epoch"]), int(loop["step"]),
                               float(loop["best_score"]), int(loop.get("stale_epochs", 0)))
        settings = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        try:
            self.optimizer.load_state_dict(train_state["optimizer"])
        except ValueError as err:  # the parameter groups differ
            raise VlattnError(f"cannot resume: the checkpoint's optimizer does not match this one ({err}); "
                              "was weight decay switched on or off?") from None
        for group, values in zip(self.optimizer.param_groups, settings):
            group.update(values)
        _set_rng_state(train_state["rng"])

    # --- the loop ----------------------------------------------------------------------------
    def _loader(self, epoch: int, skip: int) -> DataLoader:
        sampler = EpochBatchSampler(
            len(self.dataset), self.options.batch_size, seed=self.options.seed, epoch=epoch, skip=skip, ctx=self.ctx
        )
        worker_seed = torch.Generator().manual_seed(self.options.seed + epoch)
        return DataLoader(
            self.dataset,
            batch_sampler=sampler,
            collate_fn=self.collate,
            num_workers=self.options.num_workers,
            generator=worker_seed,
            pin_memory=self.device.type == "cuda",
        )

    def _step(self, batch: Batch) -> dict[str, float]:
        lr = self.schedule.lr_at(self.state.step, self.state.epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        loss, logs = self.objective(self.model, _to_device(batch, self.device))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()} at step {self.state.step} (epoch {self.state.epoch})")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(self.model, self.ctx)
        if self.options.grad_clip > 0:
            logs["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.grad_clip))
        self.optimizer.step()
        self.state.step += 1
        return {"loss": float(loss.detach()), "lr": lr, **logs}

    def _end_epoch(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.validate is not None and self.ctx.is_main:
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                self.model.eval()
                with torch.no_grad():
                    metrics = self.validate(self.model)
            self.log.write("val", self.state.step, epoch=self.state.epoch, stage=self.options.stage, **metrics)
        if metrics and self.options.selection_metric not in metrics:
            raise KeyError(f"validation gave no {self.options.selection_metric!r} (the selection metric); got {sorted(metrics)}")
        score = metrics.get(self.options.selection_metric, -math.inf)
        improved = score > self.state.best_score
        if improved:
            self.state.best_score = score
        stale = 0 if improved else self.state.stale_epochs + 1
        self.state.stale_epochs = broadcast_int(stale, self.ctx, self.device)  # rank 0 validated
        self.state.epoch += 1
        self.state.batch_in_epoch = 0
        self.save("last")
        if improved:
            self.save("best")
        return metrics

    def _done(self) -> bool:
        return self.options.max_steps > 0 and self.state.step >= self.options.max_steps

    def _out_of_patience(self) -> bool:
        return 0 < self.options.patience <= self.state.stale_epochs

    def fit(self) -> dict[str, float]:
        """Train until ``epochs`` are done; returns the last validation metrics.

        ``max_steps`` (> 0) ends the run early: the epoch in progress is closed where it stops
        (validated, saved as ``last``/``best``), which keeps quick runs usable.
        """
        last_metrics: dict[str, float] = {}
        quiet = not sys.stderr.isatty() or not self.ctx.is_main
        while self.state.epoch < self.options.epochs and not self._done() and not self._out_of_patience():
            loader = self._loader(self.state.epoch, self.state.batch_in_epoch)
            bar = tqdm(loader, desc=f"{self.options.stage} epoch {self.state.epoch + 1}/{self.options.epochs}", disable=quiet)
            for batch in bar:
                logs = self._step(batch)
                self.state.batch_in_epoch += 1
                bar.set_postfix(loss=f"{logs['loss']:.3f}", lr=f"{logs['lr']:.2e}")
                if self.state.step % self.options.log_every == 0:
                    self.log.write("train", self.state.step, epoch=self.state.epoch, stage=self.options.stage, **logs)
                if self.options.checkpoint_every and self.state.step % self.options.checkpoint_every == 0:
                    self.save("last")
                if self._done():
                    break
            last_metrics = self._end_epoch()
        if self._out_of_patience():
            self.log.write("stop", self.state.step, epoch=self.state.epoch, stage=self.options.stage,
                           reason=f"no better {self.options.selection_metric} for {self.state.stale_epochs} epochs")
        self.log.close()
        return last_metrics
