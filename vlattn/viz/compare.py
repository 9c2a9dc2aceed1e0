"""``vlattn compare RUN ...``: one table (and optionally a bar chart) of several runs side by side — each run's
test metrics from its latest ``vlattn eval`` (``RUN/eval/<split>_metrics.json``), its parameters, the backbone's
multiply-adds per sample, the FLOPs and the latency of a decoding step (captioning) or of answering a batch (VQA),
all measured by the task's own ``profile`` at the task's default shapes, so every run is measured alike."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vlattn.errors import DataError
from vlattn.tasks import task_of
from vlattn.training.checkpoint import load_checkpoint
from vlattn.viz import figures


def evaluation_scores(run: Path, split: str) -> dict[str, float]:
    """The numeric scores of ``run``'s ``<split>`` evaluation (captioning ``scores``; VQA ``overall`` and the
    answer types); empty when the run has not been evaluated."""
    path = run / "eval" / f"{split}_metrics.json"
    if not path.is_file():
        return {}
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"unreadable evaluation report: {err}", path=path) from err
    scores = report.get("scores") or report.get("accuracy") or {}
    if isinstance(scores, (int, float)):
        scores = {"accuracy": scores}
    return {k: float(v) for k, v in scores.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def profile_run(run: Path, repeats: int) -> dict[str, float]:
    """Parameters, backbone MAdds per sample, inference FLOPs and latency of ``run``'s model (random weights of its
    config: the counts and the speed do not depend on the trained values)."""
    checkpoint = load_checkpoint(run)
    cfg = checkpoint.config
    task = task_of(cfg.task)
    words = checkpoint.vocabulary("words", _load_words)
    shapes = dataclasses.replace(task.profile_shapes, vocab_size=len(words), repeats=repeats)
    report = task.profile(cfg, shapes)
    row = {"parameters": float(report["parameters"]["total"])}
    if report.get("backbone"):
        row["backbone MAdds"] = float(report["backbone"]["madds_per_sample"])
    inference = [name for name in report["flops"] if name != "train_step"]
    if inference:
        row[f"{inference[0]} GFLOPs"] = report["flops"][inference[0]] / 1e9
    latency = [name for name in report["latency_ms"] if name != "train_step_ms"]
    if latency:
        row[latency[0]] = float(report["latency_ms"][latency[0]])
    return row


def _load_words(path: Path) -> Any:
    from vlattn.data.vocab import Vocabulary

    return Vocabulary.load(path)


def compare(runs: Sequence[Path], split: str = "test", repeats: int = 3) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Column names and one row per run (its directory name; the path when names repeat)."""
    rows: dict[str, dict[str, float]] = {}
    names = [run.name for run in runs]
    for run, name in zip(runs, names, strict=True):
        key = str(run) if names.count(name) > 1 else name
        rows[key] = {**evaluation_scores(run, split), **profile_run(run, repeats)}
    columns = list(dict.fromkeys(column for row in rows.values() for column in row))
    return columns, rows


def table(columns: Sequence[str], rows: dict[str, dict[str, float]]) -> str:
    """A Markdown table; a run without a value leaves its cell empty."""
    def cell(value: float | None) -> str:
        if value is None:
            return ""
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(row.get(c)) for c in columns) + " |" for name, row in rows.items()]
    return "\n".join(lines)


def chart(columns: Sequence[str], rows: dict[str, dict[str, float]]) -> bytes:
    """One bar chart per column, the runs side by side."""
    plt = figures.pyplot()
    figure, axes = plt.subplots(1, len(columns), figsize=(2.6 * len(columns), 3.2), squeeze=False)
    names = list(rows)
    for axis, column in zip(axes[0], columns, strict=True):
        values = np.array([rows[name].get(column, np.nan) for name in names])
        axis.bar(range(len(names)), values, color=[f"C{i}" for i in range(len(names))])
        axis.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
        axis.set_title(column, fontsize=8)
    figure.tight_layout()
    return figures.to_png(figure)
