"""A run report: the training curves of one or more runs and ``vlattn explain`` for a few test images of the
last, under one new directory (``make demo`` writes ``runs/demo/report/index.html``)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from vlattn.errors import DataError
from vlattn.io import atomic_write_text, make_temporary_dir, replace_dir
from vlattn.viz.curves import curves_page, plot_curves
from vlattn.viz.explain import explain


def write_report(runs: Sequence[Path], image_ids: Sequence[int], out: Path) -> Path:
    """``out``/index.html: the curves of ``runs`` (``curves.png``) and one explanation per image of ``image_ids``
    by the last run (``image-<id>/index.html``); ``out`` must not exist. Returns the page's path."""
    if out.exists() or out.is_symlink():
        raise DataError("exists; the report is written to a new directory", path=out)
    tmp = make_temporary_dir(out)
    (tmp / "curves.png").write_bytes(plot_curves(runs))
    links = []
    for image_id in image_ids:
        explain(runs[-1], image_id, tmp / f"image-{image_id}")
        links.append(f"<li><a href='image-{image_id}/index.html'>image {image_id}</a></li>")
    curves = curves_page(runs, "curves.png")
    body = curves[curves.index("<body>") + len("<body>"): curves.index("</body>")]
    atomic_write_text(tmp / "index.html", (
        "<!doctype html><html><head><meta charset='utf-8'><title>vlattn run report</title></head><body>"
        f"<h1>Run report: {html.escape(', '.join(r.name for r in runs))}</h1>{body}"
        f"<h2>What the model attends to ({html.escape(runs[-1].name)})</h2><ul>{''.join(links)}</ul></body></html>\n"))
    replace_dir(tmp, out)
    return out / "index.html"
