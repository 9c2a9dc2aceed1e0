"""Line plots of histograms as PNG files, drawn with Pillow (the project has no plotting dependency)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from vlattn.io import atomic_path

PANEL_W, PANEL_H = 380, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 14, 34, 44


@dataclass
class Curve:
    """One histogram: ``counts`` per bin, drawn as a polyline of log10(1 + count) in ``color``."""

    label: str
    counts: Sequence[float]
    color: tuple[int, int, int]


@dataclass
class Panel:
    """A titled panel of curves over the same bins."""

    title: str
    curves: list[Curve]


def tick(value: float) -> str:
    return "0" if value == 0 else f"{value:.0e}" if abs(value) < 1e-2 or abs(value) >= 1e3 else f"{value:.2g}"


def draw_panel(draw: ImageDraw.ImageDraw, font: ImageFont.ImageFont, origin: tuple[int, int], panel: Panel,
               edges: Sequence[float], y_max: float, x_label: str) -> None:
    """One panel at ``origin`` (top-left pixel): axes, ticks, curves, title."""
    x0, y0 = origin[0] + LEFT, origin[1] + TOP
    x1, y1 = origin[0] + PANEL_W - RIGHT, origin[1] + PANEL_H - BOTTOM
    draw.rectangle([x0, y0, x1, y1], outline=(0, 0, 0))
    centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
    span = edges[-1] - edges[0]

    def px(value: float) -> float:
        return x0 + (value - edges[0]) / span * (x1 - x0)

    def py(count: float) -> float:
        return y1 - math.log10(1 + count) / y_max * (y1 - y0)

    for value in (edges[0], (edges[0] + edges[-1]) / 2, edges[-1]):
        draw.line([px(value), y1, px(value), y1 + 4], fill=(0, 0, 0))
        draw.text((px(value) - draw.textlength(tick(value), font=font) / 2, y1 + 6), tick(value), fill=(0, 0, 0), font=font)
    for decade in range(int(y_max) + 1):
        y = y1 - decade / y_max * (y1 - y0)
        draw.line([x0 - 4, y, x0, y], fill=(0, 0, 0))
        draw.text((x0 - 40, y - 6), f"1e{decade}", fill=(0, 0, 0), font=font)
    for curve in panel.curves:
        draw.line([(px(c), py(n)) for c, n in zip(centres, curve.counts)], fill=curve.color, width=2)
    draw.text((x0, origin[1] + 8), panel.title, fill=(0, 0, 0), font=font)
    draw.text(((x0 + x1 - draw.textlength(x_label, font=font)) / 2, y1 + 22), x_label, fill=(0, 0, 0), font=font)


def histogram_figure(path: str | Path, rows: list[tuple[list[Panel], Sequence[float], str]], y_label: str) -> None:
    """Write a PNG with one row of panels per ``(panels, bin edges, x label)``; y is log10(1 + count), shared."""
    counts = [n for panels, _, _ in rows for panel in panels for curve in panel.curves for n in curve.counts]
    y_max = max(1.0, math.ceil(math.log10(1 + max(counts))))
    columns = max(len(panels) for panels, _, _ in rows)
    image = Image.new("RGB", (columns * PANEL_W, len(rows) * PANEL_H + 24), "white")
    draw, font = ImageDraw.Draw(image), ImageFont.load_default()
    for r, (panels, edges, x_label) in enumerate(rows):
        for c, panel in enumerate(panels):
            draw_panel(draw, font, (c * PANEL_W, r * PANEL_H), panel, edges, y_max, x_label)
    legend = sorted({(curve.label, curve.color) for panels, _, _ in rows for panel in panels for curve in panel.curves})
    x = 10
    for label, color in legend:
        draw.line([x, len(rows) * PANEL_H + 12, x + 24, len(rows) * PANEL_H + 12], fill=color, width=3)
        draw.text((x + 30, len(rows) * PANEL_H + 6), label, fill=(0, 0, 0), font=font)
        x += 40 + 7 * len(label)
    draw.text((columns * PANEL_W - 7 * len(y_label) - 10, len(rows) * PANEL_H + 6), y_label, fill=(0, 0, 0), font=font)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG")
