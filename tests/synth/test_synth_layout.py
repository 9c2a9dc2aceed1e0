"""Output layout: every file is readable by the data-layer readers and agrees with scenes.json."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from vlattn.data.cli import app
from vlattn.data.features import open_store
from vlattn.data.karpathy import load_coco_captions, load_karpathy
from vlattn.data.synth import Confound, generate
from vlattn.data.synth.lexicon import COLOURS, SHAPES, SIZES
from vlattn.errors import ConfigError, DataError

TINY = {"images": 12, "feature_dim": 8, "extractor_epochs": 1, "val_size": 2, "test_size": 2}


def test_karpathy_split_and_coco_references(synth_dir: Path) -> None:
    entries = load_karpathy(synth_dir / "dataset.json")
    assert [e.image_id for e in entries] == list(range(1, 121))
    assert [sum(e.split == s for e in entries) for s in ("train", "val", "test")] == [60, 30, 30]
    for split in ("val", "test"):
        refs = load_coco_captions(synth_dir / f"captions_{split}.json")
        assert refs == {e.image_id: e.raw for e in entries if e.split == split}
    for e in entries[:5]:
        with Image.open(synth_dir / e.filepath / e.filename) as image:
            assert image.size == (80, 80) and image.mode == "RGB"


def test_scenes_ground_truth(scenes: dict[int, dict]) -> None:
    for image in scenes.values():
        objects = image["objects"]
        assert 1 <= len(objects) <= 5
        for o in objects:
            assert o["shape"] in SHAPES and o["colour"] in COLOURS and o["size"] in SIZES
            x1, y1, x2, y2 = o["box"]
            assert 0 <= x1 < x2 <= 80 and 0 <= y1 < y2 <= 80
        covered = sorted(r["object"] for r in image["regions"] if r["object"] is not None)
        assert covered == list(range(len(objects)))
        assert 0 <= len(image["regions"]) - len(objects) <= 2


def test_feature_stores_match_regions(synth_dir: Path, scenes: dict[int, dict]) -> None:
    store = open_store(synth_dir / "features", dim=64)
    grid = open_store(synth_dir / "grid_features", dim=64)
    assert store.ids() == grid.ids() == sorted(scenes)
    for image_id, image in scenes.items():
        regions = store.get(image_id)
        assert (regions.width, regions.height) == (80, 80)
        np.testing.assert_allclose(regions.boxes, [r["box"] for r in image["regions"]], atol=0.01)
        assert np.isfinite(regions.features).all() and regions.features.shape == (len(image["regions"]), 64)
        cells = grid.get(image_id)
        assert cells.features.shape == (4, 64) and cells.boxes.tolist()[3] == [40, 40, 80, 80]


def test_existing_output_is_kept_and_failed_runs_leave_nothing(tmp_path: Path) -> None:
    out = generate(tmp_path / "data", **TINY)
    before = (out / "scenes.json").read_bytes()
    with pytest.raises(DataError, match="exists"):
        generate(out, seed=1, **TINY)

    def fail(line: str) -> None:
        if line.startswith("files written"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate(out, seed=1, overwrite=True, log=fail, **TINY)
    assert (out / "scenes.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    generate(out, seed=1, overwrite=True, **TINY)
    assert (out / "scenes.json").read_bytes() != before


@pytest.mark.parametrize(
    "kwargs",
    [{"images": 3, "val_size": 2, "test_size": 1}, {"image_size": 16}, {"feature_dim": 0}, {"extractor_epochs": 0}],
)
def test_bad_options_are_config_errors(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        generate(tmp_path / "data", **{**TINY, **kwargs})
    assert not (tmp_path / "data").exists()


def test_cli_synth(tmp_path: Path) -> None:
    parent = typer.Typer()
    parent.add_typer(app, name="data")
    args = ["data", "synth", "--out", str(tmp_path / "d"), "--images", "12", "--val", "2", "--test", "2",
            "--feature-dim", "8", "--epochs", "1", "--confound", "red:circle", "--confound-p", "0.8"]
    result = CliRunner().invoke(parent, args)
    assert result.exit_code == 0, result.output
    assert "wrote 12 images" in result.output and (tmp_path / "d" / "confound.json").is_file()
    bad = CliRunner().invoke(parent, [*args[:3], str(tmp_path / "e"), "--confound", "red-circle"])
    assert isinstance(bad.exception, ConfigError) and not (tmp_path / "e").exists()


@pytest.mark.parametrize("specs", [["red"], ["red:blob"], ["grey:circle"], ["red:circle", "blue:circle"]])
def test_confound_option_errors(specs: list[str]) -> None:
    with pytest.raises(ConfigError):
        Confound.parse(specs)
