"""The task protocol: what ``vlattn train``, ``vlattn eval`` and ``vlattn profile`` need of a task.

A task (image captioning, visual question answering, ...) is one module of :mod:`vlattn.tasks` holding
everything specific to it — data, model building, objectives, validation, evaluation — behind this
protocol, and one entry in :data:`vlattn.tasks.TASKS`. Configs name their task (``task: captioning``);
model kinds declare the task they serve (:class:`vlattn.models.ModelKind`). The trainer, the stage runner
(:mod:`vlattn.training.stage`), the checkpoints and the CLI never look inside a task.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from vlattn.config import Config, ModelConfig
from vlattn.errors import ConfigError
from vlattn.models.profile import grid_cells
from vlattn.training.checkpoint import Checkpoint
from vlattn.training.stage import Stage


@dataclass(frozen=True)
class EvalRequest:
    """What ``vlattn eval`` asks for: the split (None: the task's default), another data root than the
    checkpoint's, a beam size for tasks that decode sequences (None: the config's; ``auto``: chosen on validation), the device, and for captioning
    whether the vocabulary projection runs packed (``eval.packed_output``; None: the config's)."""

    split: str | None = None
    data_root: Path | None = None
    beam_size: int | str | None = None  # a number, or "auto" (captioning: chosen on validation)
    device: str = "auto"
    packed_output: bool | None = None  # captioning: eval.packed_output for this run (None: the config's)


@dataclass(frozen=True)
class ProfileShapes:
    """Input shapes of ``vlattn profile``: ``batch`` images of ``regions`` regions, token sequences of
    ``length`` over ``vocab_size`` words, ``answers`` candidate answers (VQA); latency is the median of
    ``repeats`` runs. Each task has its own defaults (:attr:`Task.profile_shapes`). ``regions`` None: the
    number of cells of the grid the model reads if it reads a fixed grid (SLA's grid positional bias), else
    ``default_regions`` (see :meth:`for_model`)."""

    batch: int = 10
    regions: int | None = None
    length: int = 20
    vocab_size: int = 10201
    repeats: int = 5
    answers: int = 3129
    default_regions: int = 50

    def for_model(self, model: nn.Module) -> ProfileShapes:
        """These shapes with ``regions`` settled for ``model``: as given, or the model's grid cells, or the
        default."""
        if self.regions is not None:
            return self
        return dataclasses.replace(self, regions=grid_cells(model) or self.default_regions)


class Task(Protocol):
    """One task. ``stages``: its training stages by name, the first being ``vlattn train``'s default.

    - ``check(cfg)``: validate, when a config loads, what the task reads from it (e.g. build the model on the
      meta device), raising a one-line ``ConfigError`` naming the key; the generic checks (task name, model
      kind's task, each stage's schedule) are done by :mod:`vlattn.validation`.
    - ``evaluate(checkpoint, request)``: score a trained model on a split, write predictions and metrics under
      :func:`output_dir`, return a JSON-able report; ``format_report`` renders it as a table.
    - ``profile(cfg, shapes)``: parameters, FLOPs and latency of the config's model (a JSON-able report);
      ``profile_shapes`` are the input shapes ``vlattn profile`` uses for the options not given.
    - ``create_model(cfg, vocab_size=, num_answers=)``: the config's model, randomly initialised, for vocabularies
      of these sizes (``vlattn.create_model``).
    """

    name: str
    stages: Mapping[str, Stage]
    profile_shapes: ProfileShapes

    def check(self, cfg: Config) -> None: ...

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]: ...

    def format_report(self, report: dict[str, Any]) -> str: ...

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]: ...

    def create_model(self, cfg: Config, *, vocab_size: int, num_answers: int | None = None) -> nn.Module: ...


def output_dir(checkpoint: Checkpoint) -> Path:
    """Where evaluation outputs go: ``RUN_DIR/eval`` for a checkpoint inside a run dir, else
    ``CHECKPOINT/eval``."""
    parent = checkpoint.path.parent
    return (parent.parent if parent.name == "checkpoints" else checkpoint.path) / "eval"


def check_feature_dim(cfg: ModelConfig, store_dim: int | None) -> None:
    """A ``ConfigError`` when the model's ``feature_dim`` is not the feature store's (when known)."""
    if store_dim is not None and store_dim != cfg.feature_dim:
        raise ConfigError(
            f"model.feature_dim={cfg.feature_dim} but the feature store holds {store_dim}-d regions; "
            f"set --set model.feature_dim={store_dim}"
        )
