"""``vlattn data convert``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from typer.testing import CliRunner

from vlattn.data.cli import app
from vlattn.data.features import MemmapStore, RegionFeatures


def test_convert_npz_to_memmap(tmp_path: Path) -> None:
    (tmp_path / "npz").mkdir()
    features = np.arange(12, dtype=np.float32).reshape(3, 4)
    boxes = np.array([[0, 0, 5, 5], [1, 1, 4, 6], [2, 0, 3, 3]], dtype=np.float32)
    np.savez(tmp_path / "npz" / "8.npz", x=features.T, bbox=boxes, image_h=20, image_w=30)
    parent = typer.Typer()
    parent.add_typer(app, name="data")
    args = ["data", "convert", "--from", str(tmp_path / "npz"), "--to", str(tmp_path / "mm"), "--format", "memmap"]
    result = CliRunner().invoke(parent, args)
    assert result.exit_code == 0, result.output
    assert "wrote 1 images (4-d features)" in result.output
    got: RegionFeatures = MemmapStore(tmp_path / "mm").get(8)
    np.testing.assert_array_equal(got.features, features)
    assert (got.width, got.height) == (30, 20)
    bad = CliRunner().invoke(parent, [*args[:-1], "zarr"])
    assert bad.exit_code == 2 and "zarr" in bad.output
