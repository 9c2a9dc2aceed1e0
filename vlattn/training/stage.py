"""Training stages, and the runner that executes a stage of any task.

A task (:mod:`vlattn.tasks`) describes each of its stages as a :class:`Stage`: a data loader, a model builder,
an objective with its training set, a validator and the validation metric that selects the best
checkpoint, plus the config keys of the stage's schedule, epochs and batch size. :func:`run_stage` does the
rest, the same for every task: where the run starts (fresh, ``--resume``, ``--init``), the seed, the
``prepare`` hooks of a fresh model (:mod:`vlattn.training.prepare`), devices and ranks, the optimiser, the
run directory, and the checkpoints (weights + config + the task's named vocabularies, through the
:class:`~vlattn.training.loop.Trainer`'s checkpoint callback).

Run directory layout::

    RUN_DIR/config.yaml            the resolved config of the run
    RUN_DIR/vocab-<name>.json      the run's vocabularies (also inside every checkpoint)
    RUN_DIR/metrics.jsonl          train/val records; a resumed run drops those written after its checkpoint
    RUN_DIR/history.jsonl          one record per start of the run (fresh, resumed, settings changed)
    RUN_DIR/checkpoints/last/      the latest checkpoint, with the training state (see
                                   :mod:`vlattn.training.checkpoint` for the files)
    RUN_DIR/checkpoints/best/      the same, for the best validation ``selection_metric``
    RUN_DIR/eval/                  predictions and metrics of ``vlattn eval``
    RUN_DIR/.vlattn.json, .lock    marker and lock file (:mod:`vlattn.training.rundir`)

A resumed run continues from ``checkpoints/last`` with the run's own configuration; ``--set`` may change training
settings (more epochs, another batch size, ...) but not the task, the model or the data. The locking, crash
recovery and configuration rules are those of :mod:`vlattn.training.rundir`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch
from torch import nn
from torch.utils.data import Dataset

from vlattn.config import Config, value_at
from vlattn.data.resources import PrepareResources
from vlattn.errors import ConfigError, DataError, TrainingInterrupted, VlattnError, one_line
from vlattn.precision import compile_layers
from vlattn.training.checkpoint import (
    STATE_FILE,
    Checkpoint,
    NamedVocabulary,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from vlattn.training.distributed import (
    DistContext,
    broadcast_parameters,
    init_distributed,
    on_main,
    pick_device,
)
from vlattn.training.logging import RunLog
from vlattn.training.loop import Batch, LoopOptions, Objective, Trainer, Validator
from vlattn.training.optim import build_optimizer
from vlattn.training.prepare import prepare_model
from vlattn.training.rundir import RunDirectory, Start, report
from vlattn.training.schedules import Scaled, build_schedule, lr_scale


# the keys the stage runner and training loop read for every stage of every task
RUN_KEYS = frozenset({"data.root", "data.num_workers", "train.seed", "train.grad_clip", "train.adam_eps",
                      "train.weight_decay", "train.max_steps", "train.log_every", "train.checkpoint_every",
                      "train.precision", "train.compile"})


class StageData(Protocol):
    """What the runner needs of the object a stage's data loader returns (the stage's other parts read the
    rest): the named vocabularies that every checkpoint of the run stores, and the resources of ``prepare``
    hooks. A data object may also offer ``summary() -> dict`` (sizes, skipped items), which the runner writes
    to ``metrics.jsonl`` as a ``data`` record once the training set is built, ``feature_extractor`` (the
    extractor record of its feature store, or None), which every checkpoint records, and ``fingerprint() -> dict``
    (hashes of what the data set holds), which every checkpoint records and a resumed run must match."""

    @property
    def vocabularies(self) -> Mapping[str, NamedVocabulary]: ...

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources: ...


D = TypeVar("D", bound=StageData)


@dataclass(frozen=True)
class Stage(Generic[D]):
    """One training stage of a task.

    - ``load_data(cfg, source)``: the stage's data; ``source`` is the checkpoint the run starts from
      (resume or ``--init``), whose vocabularies must be reused, or None for a fresh run.
    - ``build_model(cfg, data)``: the model (randomly initialised from the seed set by the runner).
    - ``objective(cfg, data, device)``: ``(model, batch) -> (loss, logs)``, over batches of
      ``collate([train_set(cfg, data)[i] ...])``.
    - ``validator(cfg, data, device)``: ``model -> metrics`` after every epoch; ``selection_metric`` names
      the metric (higher is better) whose best value picks ``checkpoints/best``.
    - ``schedule``, ``epochs``, ``batch_size``, ``patience``, ``adam_betas``: the config keys of the stage's
      learning-rate schedule (a ``Spec``), number of epochs, batch size, early-stopping patience (epochs
      without a better ``selection_metric``; 0 = never) and Adam betas (a None value: ``train.adam_betas``).
    - ``length_buckets``: the config key of the number of batches per length-sorting pool (``train.length_buckets``,
      :func:`~vlattn.training.loop.epoch_order`; the training set must offer ``lengths()``), or None: batches of the
      plain permutation.
    - ``needs_init``: the stage starts from trained weights (``--init``), e.g. SCST.
    - ``lr_scaling``: ``train.lr_scaling`` applies to the stage's schedule (LW-Transformer Sec. IV-C scales its
      cross-entropy rate by sqrt(k), not the CIDEr-D optimisation's).
    - ``finish(cfg, data, best, device)``: run on the main rank once training ends, with ``best`` the directory of
      the run's best checkpoint (captioning: choose the beam size on validation), or None: nothing to do.
    """

    name: str
    summary: str
    load_data: Callable[[Config, Checkpoint | None], D]
    build_model: Callable[[Config, D], nn.Module]
    objective: Callable[[Config, D, torch.device], Objective]
    train_set: Callable[[Config, D], Dataset]
    collate: Callable[[list[Any]], Batch]
    validator: Callable[[Config, D, torch.device], Validator]
    selection_metric: str
    schedule: str = "train.schedule"
    epochs: str = "train.epochs"
    batch_size: str = "train.batch_size"
    patience: str = "train.patience"
    adam_betas: str = "train.adam_betas"
    length_buckets: str | None = None
    needs_init: bool = False
    lr_scaling: bool = False
    finish: Callable[[Config, D, Path, torch.device], None] | None = None

    def reads(self) -> frozenset[str]:
        """The config keys the stage runner reads for this stage: its own (schedule, epochs, ...) and
        :data:`RUN_KEYS`."""
        own = (self.schedule, self.epochs, self.batch_size, self.patience, self.adam_betas, self.length_buckets)
        return RUN_KEYS | {key for key in own if key is not None} | ({"train.lr_scaling"} if self.lr_scaling else set())


def starting_point(stage: Stage, cfg: Config, start: Start, init: str | Path | None) -> Checkpoint | None:
    """The checkpoint a run starts from: the run's own one (``start.resume_from``, with its training state), the
    ``init`` one (weights and vocabularies only), or None for a fresh run."""
    if start.resume_from is not None:
        if init is not None:
            start.notes.append(f"--init {init} ignored: a resumed run continues from its own checkpoint")
        return load_checkpoint(start.resume_from, with_state=True)
    if init is not None:
        source = load_checkpoint(init)
        if source.config.task != cfg.task:
            raise ConfigError(f"--init {init}: a {source.config.task} checkpoint, but the config's task is {cfg.task!r}")
        return source
    if stage.needs_init:
        raise VlattnError(f"stage {stage.name!r} starts from a trained model: pass --init CHECKPOINT (e.g. the run "
                          "directory of the previous stage)")
    return None


def data_fingerprint(data: StageData) -> dict[str, str]:
    """The data object's ``fingerprint()`` (hashes of what the data set holds), or {} if it offers none."""
    fingerprint = getattr(data, "fingerprint", None)
    return {} if fingerprint is None else dict(fingerprint())


def check_same_data(recorded: Mapping[str, str] | None, found: Mapping[str, str], cfg: Config) -> None:
    """A resumed run must train on the data set it was trained on (it may have moved: ``data.root`` may change)."""
    if recorded is None:
        return
    differ = sorted(key for key in set(recorded) | set(found) if recorded.get(key) != found.get(key))
    if differ:
        raise ConfigError(f"cannot resume: data.root={cfg.data.root} holds another data set than the run was trained "
                          f"on ({', '.join(differ)} differ); point data.root at the run's data set, or start a new "
                          "run with --init to reuse its weights")


def run_stage(
    stage: Stage, cfg: Config | None, run_dir: str | Path, *, overrides: Sequence[str] = (), resume: bool = False,
    device: str = "auto", init: str | Path | None = None, check: Callable[[Config], None] | None = None,
) -> dict[str, float]:
    """Train ``stage`` in ``run_dir`` (fresh, resumed, or from ``init`` weights); returns the last validation metrics.

    ``cfg``: the configuration given (``--config`` with ``overrides`` applied); on ``resume`` it may be None (the
    run keeps its own) and ``overrides`` (the ``--set`` items) are what changes (:func:`~vlattn.training.rundir.
    resume_config`). ``check``: raises a ``ConfigError`` for a configuration whose components the registries refuse
    (the tasks' :func:`~vlattn.tasks.check_components`), applied to the run's configuration before anything is
    written. Raises :class:`~vlattn.errors.TrainingInterrupted` when stopped by SIGINT/SIGTERM.
    """
    ctx = init_distributed(torch.device("cuda") if torch.cuda.is_available() and device != "cpu" else torch.device("cpu"))
    dev = pick_device(device, ctx)
    run = RunDirectory(run_dir)
    with contextlib.ExitStack() as held:

        def begin() -> Start:  # rank 0, shared with the other ranks
            run.check_claimable(resume)  # before the lock file is created in a directory that is not the run's
            held.enter_context(run.locked())
            start = run.begin(cfg, overrides, resume=resume)
            if check is not None:
                check(start.config)
            return start

        start = on_main(ctx, begin)
        try:
            return _train(stage, start, run, init, ctx, dev)
        except TrainingInterrupted as stop:
            stop.run_dir = run.path
            raise


def _train(stage: Stage, start: Start, run: RunDirectory, init: str | Path | None, ctx: DistContext,
           dev: torch.device) -> dict[str, float]:
    cfg = start.config
    source = starting_point(stage, cfg, start, init)
    resuming = start.resume_from is not None and source is not None and source.train_state is not None
    torch.manual_seed(cfg.train.seed)
    data = stage.load_data(cfg, source)
    fingerprint = data_fingerprint(data)
    if resuming:
        assert source is not None and source.train_state is not None
        check_same_data(source.train_state.get("data"), fingerprint, cfg)
    model = stage.build_model(cfg, data)
    prepared: list[str] = []
    if source is not None:
        load_weights(model, source)
    elif ctx.is_main:
        prepared = prepare_model(model, lambda: data.prepare_resources(model, cfg.train.seed))
    model.to(dev)
    broadcast_parameters(model, ctx)
    if cfg.train.compile:
        compile_layers(model)
    vocabularies = dict(data.vocabularies)
    if start.resume_from is not None and source is not None:
        run.check_vocabularies(source.hashes, vocabularies)

    extractor = getattr(data, "feature_extractor", None)  # optional: the training store's extractor record

    def write_checkpoint(name: str, train_state: dict[str, Any]) -> None:
        state = {**train_state, "data": fingerprint}
        save_checkpoint(run.checkpoints / name, model, cfg, vocabularies, state, extractor, owner=run.run_id)

    train = cfg.train
    betas = value_at(cfg, stage.adam_betas) or train.adam_betas
    dataset = stage.train_set(cfg, data)
    epochs, batch_size = value_at(cfg, stage.epochs), value_at(cfg, stage.batch_size)
    total_steps = max(epochs * (math.ceil(len(dataset) / batch_size) // ctx.world_size), 1)
    schedule = build_schedule(value_at(cfg, stage.schedule), d_model=cfg.model.d_model, where=stage.schedule,
                              total_steps=total_steps)
    trainer = Trainer(
        model=model,
        optimizer=build_optimizer(model, (float(betas[0]), float(betas[1])), train.weight_decay, train.adam_eps),
        schedule=Scaled(schedule, lr_scale(train.lr_scaling, model) if stage.lr_scaling else 1.0),
        objective=stage.objective(cfg, data, dev),
        dataset=dataset,
        collate=stage.collate,
        validate=stage.validator(cfg, data, dev),
        write_checkpoint=write_checkpoint,
        options=LoopOptions(
            stage=stage.name,
            epochs=epochs,
            batch_size=batch_size,
            seed=train.seed,
            selection_metric=stage.selection_metric,
            grad_clip=train.grad_clip,
            log_every=train.log_every,
            checkpoint_every=train.checkpoint_every,
            max_steps=train.max_steps,
            num_workers=cfg.data.num_workers,
            patience=value_at(cfg, stage.patience),
            precision=train.precision,
            length_buckets=value_at(cfg, stage.length_buckets) if stage.length_buckets else 0,
        ),
        device=dev,
        ctx=ctx,
    )
    keep = 0
    if resuming:
        assert source is not None and source.train_state is not None
        try:
            trainer.restore(source.train_state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as err:
            raise DataError(f"malformed training state ({type(err).__name__}: {one_line(err)}); resume from "
                            "another checkpoint or start a new run with --init", path=source.path / STATE_FILE) from None
        except VlattnError as err:  # refused by the trainer (stage, loop counters, optimizer): name the file
            raise DataError(str(err), path=source.path / STATE_FILE) from None
        keep = trainer.state.log_records
    # every check has passed: from here on the run's files change
    if ctx.is_main:
        report(start)
        run.commit(cfg, vocabularies, start, trainer.state.step, stage.name)
    log = RunLog(run.path, enabled=ctx.is_main, keep=keep, purge_step=trainer.state.step + 1 if resuming else 0)
    summary = getattr(data, "summary", None)  # optional: sizes of the stage's data for the run log
    if summary is not None:  # at the step the run (re)starts from: one record per start
        log.write("data", trainer.state.step, stage=stage.name, **summary())
    if prepared:
        log.write("prepare", 0, stage=stage.name, modules=", ".join(prepared))
    metrics = trainer.fit(log)
    if stage.finish is not None and ctx.is_main:
        stage.finish(cfg, data, run.checkpoints / "best", dev)
    return metrics
