"""Tasks and their registry: one module per task behind the :class:`~vlattn.tasks.base.Task` protocol.

``TASKS`` maps the config's ``task`` to the task; :func:`train` and :func:`evaluate` dispatch on it, as
``vlattn train``/``vlattn eval`` do, and :func:`check_components` checks the components a config names against the
registries before either builds anything. A new task is one module and one line here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vlattn.config import Config, lookup, set_keys, value_at
from vlattn.errors import ConfigError
from vlattn.models import model_kind
from vlattn.tasks.answerer import Answerer
from vlattn.tasks.base import EvalRequest, ProfileShapes, Task, output_dir
from vlattn.tasks.captioner import Captioner
from vlattn.tasks.captioning import CAPTIONING
from vlattn.tasks.nlvr2 import NLVR2
from vlattn.tasks.pretraining import PRETRAINING
from vlattn.tasks.vqa import VQA
from vlattn.training.checkpoint import load_checkpoint
from vlattn.training.distributed import pick_device
from vlattn.training.rundir import RunDirectory
from vlattn.training.schedules import check_schedule
from vlattn.training.stage import Stage, run_stage

TASKS: dict[str, Task] = {
    "captioning": CAPTIONING, "vqa": VQA, "nlvr2": NLVR2, "pretraining": PRETRAINING,
}
# the trained-model object each task gives Python callers (vlattn.load)
PREDICTORS: dict[str, type[Captioner] | type[Answerer]] = {"captioning": Captioner, "vqa": Answerer}


def task_of(name: str) -> Task:
    """The registered task ``name``; an unknown name is a ``ConfigError`` naming the ``task`` key."""
    return lookup(TASKS, name, "task", "task")


def check_components(cfg: Config, named: Iterable[str] = ()) -> None:
    """Raise a one-line ``ConfigError`` naming the key for the first invalid component of ``cfg``: the task, the
    model kind and the task it serves, the keys set (differing from their defaults, or ``named``: given
    explicitly) that neither the model kind, the task nor any of its stages reads, compilation of a kind without
    layers, what the task reads (its
    :meth:`~vlattn.tasks.base.Task.check`: for captioning the model options, each attention site's mechanism, options
    and placement, feed-forward) and the schedule of every stage of the task."""
    task = task_of(cfg.task)
    kind = model_kind(cfg.model.kind, cfg.task)
    read = {"task"} | {f"model.{key}" for key in kind.reads} | task.reads
    for stage in task.stages.values():
        read |= stage.reads()
    unread = [key for key in dict.fromkeys([*set_keys(cfg), *sorted(named)]) if key not in read]
    if unread:
        model_keys = [key for key in unread if key.startswith("model.")]
        other = [key for key in unread if not key.startswith("model.")]
        readers = ([f"model kind {cfg.model.kind!r}"] if model_keys else []) + \
                  ([f"task {cfg.task!r} (stages: {', '.join(task.stages)})"] if other else [])
        raise ConfigError(f"config keys never read by {' or '.join(readers)}: {', '.join(unread)} (remove them)")
    for key in ("train.compile", "eval.compile"):
        if value_at(cfg, key) and not kind.layered:
            raise ConfigError(f"{key}: model kind {cfg.model.kind!r} has no layer stack to compile (set it to false)")
    task.check(cfg)
    for stage in task.stages.values():
        check_schedule(value_at(cfg, stage.schedule), stage.schedule)


def stage_of(task: Task, name: str | None) -> Stage:
    """Stage ``name`` of ``task`` (None: its first stage); an unknown name lists the task's stages."""
    if name is None:
        return next(iter(task.stages.values()))
    if name not in task.stages:
        valid = "; ".join(f"{stage} ({entry.summary})" for stage, entry in task.stages.items())
        raise ConfigError(f"--stage: task {task.name!r} has no stage {name!r}; valid: {valid}")
    return task.stages[name]


def train(
    cfg: Config | None, run_dir: str | Path, *, overrides: Sequence[str] = (), stage: str | None = None,
    resume: bool = False, device: str = "auto", init: str | Path | None = None,
) -> dict[str, float]:
    """Run ``stage`` of the config's task in ``run_dir``; returns the last validation metrics.

    ``cfg``: the configuration given (with the ``overrides`` applied); on ``resume`` it may be None: the run keeps
    its own configuration, ``overrides`` (``--set`` items) change training settings, and the stage defaults to
    the one of the run's checkpoint. Otherwise the stage defaults to the task's first.
    """
    _, chosen = stage_for_run(cfg, run_dir, stage, resume=resume)
    return run_stage(chosen, cfg, run_dir, overrides=overrides, resume=resume, device=device, init=init,
                     check=check_components)


def stage_for_run(cfg: Config | None, run_dir: str | Path, stage: str | None, *, resume: bool) -> tuple[str, Stage]:
    """The task and stage :func:`train` runs: ``stage`` of the task of ``cfg`` (on ``resume``: of the run in
    ``run_dir``); by default the task's first stage, or on ``resume`` the stage of the run's checkpoint."""
    if cfg is None and not resume:
        raise ConfigError("--config is required to start a run (only --resume can do without it)")
    task, saved_stage = (cfg.task if cfg is not None else None), None
    if resume:
        task, saved_stage = resume_target(run_dir, task)
    return task, stage_of(task_of(task), stage if stage is not None else saved_stage)


def resume_target(run_dir: str | Path, task: str | None) -> tuple[str, str | None]:
    """The task and stage of the run in ``run_dir`` (read without its lock: neither ever changes in a run).
    ``task`` (of a ``--config`` given) is checked against the run's."""
    run = RunDirectory(run_dir)
    latest = run.latest()
    checkpoint = load_checkpoint(latest, with_state=True) if latest is not None else None
    saved = checkpoint.config if checkpoint is not None else run.saved_config()
    if saved is None:
        if task is None:
            raise ConfigError(f"{run_dir}: nothing to resume (no checkpoint and no config.yaml); pass --config to "
                              "start a run")
        return task, None
    if task is not None and task != saved.task:
        raise ConfigError(f"cannot resume: --config has task={task!r} but the run is a {saved.task} run")
    state = checkpoint.train_state if checkpoint is not None else None
    return saved.task, None if state is None else str(state.get("stage"))


def evaluate(checkpoint: str | Path, request: EvalRequest = EvalRequest()) -> dict[str, Any]:
    """Evaluate a checkpoint (or run directory) of any task; the report's ``task`` names the task."""
    loaded = load_checkpoint(checkpoint)
    check_components(loaded.config)
    task, show, shown = loaded.config.task, request.show, []
    if show is not None:
        request = dataclasses.replace(request, show=lambda report: shown.append(show({"task": task, **report})))
    report = {"task": task, **task_of(task).evaluate(loaded, request)}
    if show is not None and not shown:  # a task that writes before it shows: shown once it is done
        show(report)
    return report


def load_predictor(checkpoint: str | Path, device: str = "auto") -> Captioner | Answerer:
    """The trained model of a checkpoint (or run directory: its best checkpoint) on ``device``, as its task's
    predictor: a :class:`Captioner` or an :class:`Answerer`."""
    loaded = load_checkpoint(checkpoint)
    check_components(loaded.config)
    if loaded.config.task not in PREDICTORS:
        raise ConfigError(f"{loaded.path}: a {loaded.config.task} checkpoint; vlattn.load serves "
                          f"{', '.join(PREDICTORS)} models (vlattn eval evaluates this one)")
    return PREDICTORS[loaded.config.task].from_checkpoint(loaded, pick_device(device))


def format_report(report: dict[str, Any]) -> str:
    """The table of an :func:`evaluate` report, as its task renders it."""
    return task_of(report["task"]).format_report(report)


__all__ = [
    "PREDICTORS",
    "TASKS",
    "Answerer",
    "Captioner",
    "EvalRequest",
    "ProfileShapes",
    "Task",
    "check_components",
    "evaluate",
    "format_report",
    "load_predictor",
    "output_dir",
    "stage_for_run",
    "stage_of",
    "task_of",
    "train",
]
