"""Tasks and their registry: one module per task behind the :class:`~vlattn.tasks.base.Task` protocol.

``TASKS`` maps the config's ``task`` to the task; :func:`train` and :func:`evaluate` dispatch on it, as
``vlattn train``/``vlattn eval`` do. A new task is one module and one line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlattn.config import Config, lookup
from vlattn.errors import ConfigError
from vlattn.tasks.base import EvalRequest, ProfileShapes, Task, output_dir
from vlattn.tasks.captioning import CAPTIONING
from vlattn.tasks.vqa import VQA
from vlattn.training.checkpoint import load_checkpoint
from vlattn.training.stage import Stage, run_stage

TASKS: dict[str, Task] = {"captioning": CAPTIONING, "vqa": VQA}


def task_of(name: str) -> Task:
    """The registered task ``name``; an unknown name is a ``ConfigError`` naming the ``task`` key."""
    return lookup(TASKS, name, "task", "task")


def stage_of(task: Task, name: str | None) -> Stage:
    """Stage ``name`` of ``task`` (None: its first stage); an unknown name lists the task's stages."""
    if name is None:
        return next(iter(task.stages.values()))
    if name not in task.stages:
        valid = "; ".join(f"{stage} ({entry.summary})" for stage, entry in task.stages.items())
        raise ConfigError(f"--stage: task {task.name!r} has no stage {name!r}; valid: {valid}")
    return task.stages[name]


def train(
    cfg: Config, run_dir: str | Path, *, stage: str | None = None, resume: bool = False, device: str = "auto",
    init: str | Path | None = None,
) -> dict[str, float]:
    """Run ``stage`` (default: the first) of the config's task in ``run_dir``; returns the last validation
    metrics."""
    chosen = stage_of(task_of(cfg.task), stage)
    return run_stage(chosen, cfg, run_dir, resume=resume, device=device, init=init)


def evaluate(checkpoint: str | Path, request: EvalRequest = EvalRequest()) -> dict[str, Any]:
    """Evaluate a checkpoint (or run directory) of any task; the report's ``task`` names the task."""
    loaded = load_checkpoint(checkpoint)
    return {"task": loaded.config.task, **task_of(loaded.config.task).evaluate(loaded, request)}


def format_report(report: dict[str, Any]) -> str:
    """The table of an :func:`evaluate` report, as its task renders it."""
    return task_of(report["task"]).format_report(report)


__all__ = [
    "TASKS",
    "EvalRequest",
    "ProfileShapes",
    "Task",
    "evaluate",
    "format_report",
    "output_dir",
    "stage_of",
    "task_of",
    "train",
]
