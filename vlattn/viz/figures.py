"""The pictures of ``vlattn explain``, each a PNG (bytes) from arrays: an image with its region boxes, attention
over regions as box-shaped overlays (one panel per word and layer, or per head), heatmaps and bar charts.
matplotlib (the ``viz`` extra) on its file-only Agg backend."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_path


def pyplot():  # noqa: ANN201 (matplotlib's module)
    """matplotlib.pyplot on the file-only Agg backend; a one-line error when the ``viz`` extra is missing."""
    try:
        import matplotlib
    except ImportError as err:
        raise ConfigError("pictures need matplotlib: pip install 'vlattn[viz]'") from err
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def to_png(figure) -> bytes:  # noqa: ANN001 (a matplotlib Figure)
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    pyplot().close(figure)
    return buffer.getvalue()


Canvas = tuple[Image.Image | None, tuple[int, int]]  # the picture (None: a blank canvas) and its (width, height)


def _show(axis, canvas: Canvas, dim: float = 1.0) -> None:  # noqa: ANN001 (a matplotlib Axes)
    image, (width, height) = canvas
    if image is None:
        axis.add_patch(pyplot().Rectangle((0, 0), width, height, color="white"))
    else:
        axis.imshow(np.asarray(image.convert("RGB")), extent=(0, width, height, 0), alpha=dim)
    axis.set_xlim(0, width)
    axis.set_ylim(height, 0)
    axis.set_xticks([])
    axis.set_yticks([])


def regions_figure(canvas: Canvas, boxes: np.ndarray) -> bytes:
    """The image with every region's box (x1, y1, x2, y2 in pixels) and its index."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5, 5 * canvas[1][1] / max(canvas[1][0], 1)))
    _show(axis, canvas)
    for index, (x1, y1, x2, y2) in enumerate(boxes):
        axis.add_patch(plt.Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="tab:orange", linewidth=1.5))
        axis.text(x1 + 1, y1 + 1, str(index), color="black", fontsize=7, va="top",
                  bbox={"facecolor": "tab:orange", "alpha": 0.7, "pad": 0.5, "linewidth": 0})
    figure.tight_layout()
    return to_png(figure)


def _overlay(axis, canvas: Canvas, boxes: np.ndarray, weights: np.ndarray) -> None:  # noqa: ANN001
    """Boxes filled in proportion to ``weights`` (N,) relative to their maximum (the strongest fully)."""
    plt = pyplot()
    _show(axis, canvas, dim=0.35)
    top = float(weights.max()) if weights.size and weights.max() > 0 else 1.0
    for (x1, y1, x2, y2), weight in sorted(zip(boxes, weights, strict=True), key=lambda item: item[1]):
        axis.add_patch(plt.Rectangle((x1, y1), x2 - x1, y2 - y1, color="tab:red", alpha=0.7 * float(weight) / top,
                                     linewidth=0))
        axis.add_patch(plt.Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="tab:red",
                                     alpha=0.3 + 0.7 * float(weight) / top, linewidth=0.8))


def overlay_grid(canvas: Canvas, boxes: np.ndarray, maps: np.ndarray, rows: Sequence[str],
                 columns: Sequence[str]) -> bytes:
    """``maps`` (rows, columns, N) of region weights as overlays: one panel per row (e.g. a word) and column
    (e.g. a decoder layer or head), titled with the row label and the strongest region's index and weight."""
    plt = pyplot()
    n_rows, n_cols = len(rows), len(columns)
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(2.2 * n_cols, 2.2 * n_rows), squeeze=False)
    for r, label in enumerate(rows):
        for c, column in enumerate(columns):
            weights = maps[r, c]
            _overlay(axes[r, c], canvas, boxes, weights)
            best = int(weights.argmax()) if weights.size else -1
            axes[r, c].set_title(f"{label} | {column}\nregion {best}: {weights[best]:.2f}", fontsize=7)
    figure.tight_layout()
    return to_png(figure)


def heatmap(matrix: np.ndarray, rows: Sequence[str], columns: Sequence[str], title: str) -> bytes:
    """``matrix`` (rows, columns) with its values written in the cells."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(1.0 + 0.6 * len(columns), 1.0 + 0.35 * len(rows)))
    image = axis.imshow(matrix, cmap="viridis", aspect="auto")
    axis.set_xticks(range(len(columns)), columns, rotation=45, ha="right", fontsize=7)
    axis.set_yticks(range(len(rows)), rows, fontsize=7)
    for r in range(matrix.shape[0]):
        for c in range(matrix.shape[1]):
            axis.text(c, r, f"{matrix[r, c]:.2f}", ha="center", va="center", fontsize=6, color="white")
    axis.set_title(title, fontsize=9)
    figure.colorbar(image, ax=axis, fraction=0.04)
    figure.tight_layout()
    return to_png(figure)


def bars(values: np.ndarray, labels: Sequence[str], title: str, ylabel: str = "") -> bytes:
    """One bar per label."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(1.5 + 0.45 * len(labels), 3.0))
    axis.bar(range(len(labels)), values, color="tab:blue")
    axis.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
    axis.set_title(title, fontsize=9)
    axis.set_ylabel(ylabel)
    figure.tight_layout()
    return to_png(figure)


def refuse_existing(*paths: Path) -> None:
    """A one-line error when any of ``paths`` exists: pictures never replace a file vlattn cannot prove it wrote."""
    existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if existing:
        raise DataError(f"will not replace {', '.join(existing)}: choose another --out or remove it")


def write_new_png(path: Path, png: bytes) -> None:
    """Write ``png`` to a new file ``path`` (atomically); an existing file is refused."""
    if path.suffix.lower() != ".png":
        raise ConfigError(f"--out {path}: expected a .png file")
    refuse_existing(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(png)


def is_png(data: bytes) -> bool:
    """Whether ``data`` decodes as a PNG image."""
    try:
        return Image.open(io.BytesIO(data)).format == "PNG"
    except OSError:
        return False
