"""Training curves of one or more runs from their ``metrics.jsonl`` (``vlattn plot``): the training loss and
learning rate per logged step, and each validation metric per epoch, the runs overlaid with a legend.

The log holds ``train`` records (``step``, ``loss``, ``lr``, ...) every ``train.log_every`` steps and ``val``
records (``epoch``, ``step`` and the task's metrics) once per validated epoch; a run with several stages (XE then
SCST in one directory) keeps its ``stage`` on each record, shown as one line per run and stage. matplotlib is the
optional ``viz`` extra; it is imported only here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_write_text
from vlattn.training.logging import LOG_FILE, read_records
from vlattn.viz.figures import pyplot, refuse_existing, to_png, write_new_png

TRAIN_SERIES = ("loss", "lr")
NOT_METRICS = {"kind", "step", "time", "epoch", "stage"}


@dataclass
class Curves:
    """The series of one run and stage: ``train[name]`` -> (steps, values) and ``val[metric]`` -> (epochs,
    values), both in log order."""

    label: str
    train: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    val: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)


def _append(series: dict[str, tuple[list[int], list[float]]], name: str, x: int, value: object) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        xs, ys = series.setdefault(name, ([], []))
        xs.append(x)
        ys.append(float(value))


def read_curves(run: Path) -> list[Curves]:
    """The curves of ``run`` (a run directory), one per stage in the order the log first mentions it; a one-line
    ``DataError`` when it has no readable ``metrics.jsonl`` records."""
    path = Path(run) / LOG_FILE
    records = read_records(path)
    if not records:
        raise DataError("no training records (is this a vlattn run directory?)", path=path)
    by_stage: dict[str, Curves] = {}
    for record in records:
        kind = record.get("kind")
        if kind not in ("train", "val"):
            continue
        stage = str(record.get("stage", ""))
        curves = by_stage.setdefault(stage, Curves(f"{Path(run).name} {stage}".strip()))
        if kind == "train":
            for name in TRAIN_SERIES:
                _append(curves.train, name, int(record.get("step", 0)), record.get(name))
        else:
            for name, value in record.items():
                if name not in NOT_METRICS:
                    _append(curves.val, name, int(record.get("epoch", 0)) + 1, value)
    return list(by_stage.values())


def plot_curves(runs: Sequence[Path]) -> bytes:
    """A PNG of the runs' curves: loss and learning rate against the step, every validation metric against the
    epoch (one panel each), every run and stage a line with a legend."""
    curves = [c for run in runs for c in read_curves(run)]
    metrics = sorted({name for c in curves for name in c.val})
    panels = [*(("train", name) for name in TRAIN_SERIES), *(("val", name) for name in metrics)]
    plt = pyplot()
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for axis, (kind, name) in zip(axes.flat, panels, strict=False):
        for c in curves:
            series = (c.train if kind == "train" else c.val).get(name)
            if series:
                axis.plot(*series, marker="o" if kind == "val" else None, markersize=3, label=c.label)
        axis.set_title(name if kind == "val" else {"loss": "training loss", "lr": "learning rate"}[name])
        axis.set_xlabel("epoch" if kind == "val" else "step")
        axis.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if not handles:
        handles, labels = next((a.get_legend_handles_labels() for a in axes.flat if a.get_legend_handles_labels()[0]),
                               ([], []))
    figure.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), frameon=False)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    return to_png(figure)


def write_plot(runs: Sequence[Path], out: Path) -> Path:
    """``out`` ``.png``: the figure; ``.html``: a page with the figure beside it (``<out stem>.png``) and a table of
    each run's last validation metrics. Returns the path written."""
    suffix = out.suffix.lower()
    if suffix not in (".png", ".html"):
        raise ConfigError(f"--out {out}: expected a .png or .html file")
    targets = [out] if suffix == ".png" else [out.with_suffix(".png"), out]
    refuse_existing(*targets)
    write_new_png(targets[0], plot_curves(runs))
    if suffix == ".html":
        atomic_write_text(out, curves_page(runs, targets[0].name))
    return out


def curves_page(runs: Sequence[Path], image: str) -> str:
    """The HTML page of :func:`write_plot`: the figure ``image`` (a file beside the page) and the last value of
    every validation metric of each run and stage."""
    curves = [c for run in runs for c in read_curves(run)]
    metrics = sorted({name for c in curves for name in c.val})
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    rows = "".join(
        "<tr><td>" + html.escape(c.label) + "</td>"
        + "".join(f"<td>{c.val[m][1][-1]:.4f}</td>" if m in c.val else "<td></td>" for m in metrics) + "</tr>"
        for c in curves
    )
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>vlattn training curves</title></head><body>"
            f"<h1>Training curves</h1><img src='{html.escape(image)}' alt='training curves'>"
            f"<h2>Last validation</h2><table border='1' cellpadding='4'><tr><th>run</th>{head}</tr>{rows}</table>"
            f"</body></html>\n")
