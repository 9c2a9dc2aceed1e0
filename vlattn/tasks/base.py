"""The task protocol: what ``vlattn train``, ``vlattn eval`` and ``vlattn profile`` need of a task.

A task (image captioning, visual question answering, ...) is one module of :mod:`vlattn.tasks` holding
everything specific to it — data, model building, objectives, validation, evaluation — behind this
protocol, and one entry in :data:`vlattn.tasks.TASKS`. Configs name their task (``task: captioning``);
model kinds declare the task they serve (:class:`vlattn.models.ModelKind`). The trainer, the stage runner
(:mod:`vlattn.training.stage`), the checkpoints and the CLI never look inside a task.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from vlattn.config import MAX_BATCH, MAX_LENGTH, MAX_VOCAB, Config, ModelConfig
from vlattn.data.vocab import SPECIALS
from vlattn.errors import ConfigError, DataError
from vlattn.io import MARKER, new_id, read_marker, write_marker, writing
from vlattn.models.footprint import GIB, available_memory
from vlattn.models.profile import grid_cells
from vlattn.training.checkpoint import Checkpoint
from vlattn.training.stage import Stage


@dataclass(frozen=True)
class EvalRequest:
    """What ``vlattn eval`` asks for: the split (None: the task's default), another data root than the
    checkpoint's, a beam size for tasks that decode sequences (None: the config's; ``auto``: chosen on validation), the
    device, and for captioning whether the vocabulary projection runs packed (``eval.packed_output``; None: the
    config's). ``show`` receives the report before the outputs are written, so it is seen even when writing them
    fails."""

    split: str | None = None
    data_root: Path | None = None
    beam_size: int | str | None = None  # a number, or "auto" (captioning: chosen on validation)
    device: str = "auto"
    packed_output: bool | None = None  # captioning: eval.packed_output for this run (None: the config's)
    show: Callable[[dict[str, Any]], None] | None = None

    def shown(self, report: dict[str, Any]) -> dict[str, Any]:
        """Pass ``report`` to :attr:`show` (if any) and return it."""
        if self.show is not None:
            self.show(report)
        return report


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

    def check(self, cfg: Config) -> None:
        """One-line ``ConfigError``\\ s naming the ``vlattn profile`` option of a shape out of range: each at least 1
        (the vocabulary: its special tokens and a word), at most the config limits (:mod:`vlattn.config`), and the
        largest activation of the model within the memory available."""
        limits = {"batch": (1, MAX_BATCH), "regions": (1, MAX_LENGTH), "length": (1, MAX_LENGTH),
                  "vocab_size": (len(SPECIALS) + 1, MAX_VOCAB), "answers": (1, MAX_VOCAB), "repeats": (1, 10_000)}
        for name, (low, high) in limits.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise ConfigError(f"--{name.replace('_', '-')} must be between {low} and {high}, got {value}")
        m = cfg.model
        regions = self.regions or self.default_regions
        # floats of the largest single tensors of a step: region features, logits over the vocabulary (or the
        # answers), one attention map over the regions
        largest = self.batch * max(regions * max(m.feature_dim, m.d_ff, m.d_model), self.length * max(
            self.vocab_size, self.answers, m.d_ff), m.num_heads * regions * max(regions, self.length))
        available = available_memory()
        if available is not None and 4 * largest > available:
            raise ConfigError(f"--batch {self.batch} with --regions {regions}, --length {self.length}: one activation "
                              f"needs {4 * largest / GIB:.1f} GiB, more than the {available / GIB:.1f} GiB of memory "
                              f"available")

    def for_model(self, model: nn.Module) -> ProfileShapes:
        """These shapes with ``regions`` settled for ``model``: as given, or the model's grid cells, or the
        default."""
        if self.regions is not None:
            return self
        return dataclasses.replace(self, regions=grid_cells(model) or self.default_regions)


class Task(Protocol):
    """One task. ``stages``: its training stages by name, the first being ``vlattn train``'s default; ``reads``:
    the config keys (``data.karpathy``, ...) the task reads beside those its stages read (``Stage.reads``) and
    those its model kind reads (``ModelKind.reads``); a config setting any other key is refused.

    - ``check(cfg)``: validate, when a config loads, what the task reads from it (e.g. build the model on the
      meta device), raising a one-line ``ConfigError`` naming the key; the generic checks (task name, model
      kind's task, each stage's schedule) are done by :mod:`vlattn.validation`.
    - ``evaluate(checkpoint, request)``: score a trained model on a split, pass the report to
      ``request.shown`` before writing predictions and metrics under :func:`output_dir` (:func:`claim_output_dir`),
      return the JSON-able report; ``format_report`` renders it as a table.
    - ``profile(cfg, shapes)``: parameters, FLOPs and latency of the config's model (a JSON-able report);
      ``profile_shapes`` are the input shapes ``vlattn profile`` uses for the options not given.
    - ``create_model(cfg, vocab_size=, num_answers=)``: the config's model, randomly initialised, for vocabularies
      of these sizes (``vlattn.create_model``).
    """

    name: str
    stages: Mapping[str, Stage]
    reads: frozenset[str]
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


EVAL_OUTPUTS = "eval-outputs"  # marker kind of an output directory of `vlattn eval`


def claim_output_dir(path: Path) -> Path:
    """``path`` (:func:`output_dir`) ready for the outputs of an evaluation: created and marked by vlattn, or one
    it marked before (its files are replaced by the next evaluation); a directory of the user's there is left as
    it is with a one-line error."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir()  # never exist_ok: a directory that is already there is checked below
            write_marker(path, EVAL_OUTPUTS, id=new_id())
    marker = None if path.is_symlink() else read_marker(path)
    if marker is None or marker["kind"] != EVAL_OUTPUTS:
        raise DataError(f"not an output directory of vlattn eval (no {MARKER} of kind {EVAL_OUTPUTS}); vlattn leaves "
                        "it as it is: move it away to write the evaluation's files", path=path)
    return path


def check_feature_dim(cfg: ModelConfig, store_dim: int | None) -> None:
    """A ``ConfigError`` when the model's ``feature_dim`` is not the feature store's (when known)."""
    if store_dim is not None and store_dim != cfg.feature_dim:
        raise ConfigError(
            f"model.feature_dim={cfg.feature_dim} but the feature store holds {store_dim}-d regions; "
            f"set --set model.feature_dim={store_dim}"
        )
