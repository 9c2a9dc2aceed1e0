"""``vlattn plot``: curves read from metrics.jsonl (per run and stage), a valid PNG, an HTML page whose image
exists, and one-line refusals."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from vlattn.errors import ConfigError, DataError
from vlattn.viz.curves import read_curves, write_plot


def make_run(root: Path, name: str, losses: list[float], cider: list[float]) -> Path:
    """A run whose log has an XE stage (train records every 10 steps, one val record per epoch) and an SCST
    stage, plus a cut-off last line (a killed writer)."""
    run = root / name
    run.mkdir()
    lines = [json.dumps({"kind": "data", "step": 0, "skipped": 0})]
    for i, loss in enumerate(losses):
        lines.append(json.dumps({"kind": "train", "stage": "xe", "step": 10 * (i + 1), "epoch": i, "loss": loss,
                                 "lr": 0.001 * (i + 1), "grad_norm": 1.0}))
        lines.append(json.dumps({"kind": "val", "stage": "xe", "step": 10 * (i + 1), "epoch": i, "CIDEr": cider[i]}))
    lines.append(json.dumps({"kind": "val", "stage": "scst", "step": 99, "epoch": 0, "CIDEr": 2.0}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"kind": "tra')
    return run


def test_curves_per_stage_from_the_log(tmp_path: Path) -> None:
    xe, scst = read_curves(make_run(tmp_path, "a", [3.0, 2.0, 1.5], [0.1, 0.4, 0.5]))
    assert xe.label == "a xe" and scst.label == "a scst"
    assert xe.train["loss"] == ([10, 20, 30], [3.0, 2.0, 1.5])
    assert xe.train["lr"] == ([10, 20, 30], [0.001, 0.002, 0.003])
    assert xe.val == {"CIDEr": ([1, 2, 3], [0.1, 0.4, 0.5])}  # epochs counted from 1
    assert scst.val == {"CIDEr": ([1], [2.0])} and scst.train == {}


def test_png_and_html_with_the_image_beside_it(tmp_path: Path, vlattn_cli) -> None:
    runs = [make_run(tmp_path, "a", [3.0, 2.0], [0.1, 0.4]), make_run(tmp_path, "b", [2.5, 1.0], [0.2, 0.6])]
    png = write_plot(runs, tmp_path / "curves.png")
    assert Image.open(io.BytesIO(png.read_bytes())).format == "PNG"
    code, out, err = vlattn_cli("plot", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "report.html"))
    assert code == 0, err
    page = (tmp_path / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert images == ["report.png"] and Image.open(tmp_path / "report.png").format == "PNG"
    assert "<td>a xe</td><td>0.4000</td>" in page and "<td>b scst</td><td>2.0000</td>" in page
    assert "http" not in page  # opens from disk, no network


def test_refusals_are_one_line(tmp_path: Path, vlattn_cli) -> None:
    run = make_run(tmp_path, "a", [1.0], [0.1])
    (tmp_path / "taken.png").write_text("a user's file")
    code, _, err = vlattn_cli("plot", str(run), "--out", str(tmp_path / "taken.png"))
    assert code == 2 and err.count("\n") == 1 and "will not replace" in err
    assert (tmp_path / "taken.png").read_text() == "a user's file"
    with pytest.raises(DataError, match="metrics.jsonl: no training records"):
        read_curves(tmp_path)
    with pytest.raises(ConfigError, match="expected a .png or .html file"):
        write_plot([run], tmp_path / "curves.svg")


def test_compare_measures_every_run_alike(tiny_run: Path, tmp_path: Path, vlattn_cli) -> None:
    """Two runs (the same tiny run twice under two names): test metrics from their eval outputs, parameters and
    the decoding step's FLOPs from the profile — equal for equal models — and a chart as a new PNG."""
    import shutil

    from vlattn.viz.compare import compare

    first, second = tmp_path / "first", tmp_path / "second"
    for copy in (first, second):  # without whatever evaluation other tests left in the shared run
        shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("eval"))
    (first / "eval").mkdir()
    (first / "eval" / "test_metrics.json").write_text(json.dumps({"scores": {"CIDEr": 0.5, "Bleu_4": 0.25}}))
    columns, rows = compare([first, second], repeats=1)
    assert rows["first"]["CIDEr"] == 0.5 and "CIDEr" not in rows["second"]  # the second was never evaluated
    assert rows["first"]["parameters"] == rows["second"]["parameters"] > 0
    assert rows["first"]["decode_step GFLOPs"] == rows["second"]["decode_step GFLOPs"] > 0
    code, out, err = vlattn_cli("compare", str(first), str(second), "--repeats", "1", "--out", str(tmp_path / "c.png"))
    assert code == 0, err
    assert out.splitlines()[0].startswith("| run | CIDEr | Bleu_4 | parameters")
    assert Image.open(tmp_path / "c.png").format == "PNG"


def test_run_report_links_curves_and_explanations(tiny_run: Path, tmp_path: Path) -> None:
    from vlattn.viz.report import write_report

    page = write_report([tiny_run], [130, 131], tmp_path / "report")
    text = page.read_text()
    links = re.findall(r"<a href='([^']+)'", text)
    assert links == ["image-130/index.html", "image-131/index.html"]
    assert re.findall(r"<img src='([^']+)'", text) == ["curves.png"]
    for link in links:
        sub = page.parent / link
        for image in re.findall(r"<img src='([^']+)'", sub.read_text()):
            assert Image.open(sub.parent / image).format == "PNG"
    with pytest.raises(DataError, match="the report is written to a new directory"):
        write_report([tiny_run], [130], tmp_path / "report")
