"""Bad input gives one line naming the file/option, exit status 2, never a traceback (docs/errors.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vlattn.data.features import RegionFeatures, write_m2_hdf5


def one_line(err: str) -> bool:
    """The error is one line (after any progress-bar output), no traceback."""
    last = err.rstrip("\n").split("\n")[-1].split("\r")[-1]
    return last.startswith("error: ") and err.endswith("\n") and "Traceback" not in err and last in err.split("\n")


@pytest.fixture
def run_dir(tiny_run: Path) -> Path:
    return tiny_run


def damaged_hdf5(path: Path, offset: int) -> Path:
    """A valid M2 file whose root group's B-tree address (bytes 136.. of the file) is overwritten."""
    rng = np.random.default_rng(0)
    items = [(i, RegionFeatures(rng.random((3, 8), dtype=np.float32), np.tile([0, 0, 4, 4], (3, 1)).astype(np.float32),
                                10, 10)) for i in range(20)]
    write_m2_hdf5(path, items)
    data = bytearray(path.read_bytes())
    data[offset:offset + 32] = np.random.default_rng(offset).integers(0, 256, 32, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("offset", [136, 144, 152, 160])
def test_hdf5_with_damaged_internals(tmp_path: Path, vlattn_cli, offset: int) -> None:
    bad = damaged_hdf5(tmp_path / "det.h5", offset)
    code, _, err = vlattn_cli("data", "convert", "--from", str(bad), "--to", str(tmp_path / "out"), "--format", "memmap")
    assert code == 2 and one_line(err) and "det.h5" in err and "damaged" in err


@pytest.mark.parametrize("group", ["3_features", "3_boxes"])
def test_hdf5_dataset_that_is_a_group(tmp_path: Path, vlattn_cli, group: str) -> None:
    with h5py.File(tmp_path / "det.h5", "w") as handle:
        handle["2_features"], handle["2_boxes"] = np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32)
        handle["3_features"], handle["3_boxes"] = np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32)
        del handle[group]
        handle.create_group(group)
    code, _, err = vlattn_cli("data", "convert", "--from", str(tmp_path / "det.h5"), "--to", str(tmp_path / "o"),
                              "--format", "memmap")
    assert code == 2 and one_line(err) and f"{group} is an HDF5 group" in err and "item 3" in err


@pytest.mark.parametrize("content", [b"model:\n  d_model: 512 \xe9\n", b"\xff\xfe m\x00o\x00d\x00"])
def test_config_that_is_not_utf8(tmp_path: Path, vlattn_cli, content: bytes) -> None:
    (tmp_path / "latin1.yaml").write_bytes(content)
    code, _, err = vlattn_cli("profile", "--config", str(tmp_path / "latin1.yaml"))
    assert code == 2 and one_line(err) and "latin1.yaml" in err and "not UTF-8" in err


@pytest.mark.parametrize(("name", "content", "where"), [("bad.yaml", "model: [1, 2\n", "YAML at line 2 column 1"),
                                                       ("bad.json", '{"model": }', "JSON at line 1 column 11")])
def test_config_syntax_error_is_one_line(tmp_path: Path, vlattn_cli, name: str, content: str, where: str) -> None:
    (tmp_path / name).write_text(content)
    code, _, err = vlattn_cli("profile", "--config", str(tmp_path / name))
    assert code == 2 and one_line(err) and name in err and where in err


@pytest.mark.parametrize("beam", ["0", "-3", "100000"])
@pytest.mark.parametrize("command", ["eval", "caption"])
def test_beam_size_out_of_range(run_dir: Path, vlattn_cli, beam: str, command: str) -> None:
    features = ["--features", str(run_dir.parent / "data" / "features")] if command == "caption" else []
    code, _, err = vlattn_cli(command, "--checkpoint", str(run_dir), "--beam-size", beam, "--device", "cpu", *features)
    assert code == 2 and one_line(err) and "--beam-size" in err
    assert ("at least 1" in err) if int(beam) < 1 else ("words of the vocabulary" in err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize("command", ["eval", "caption"])
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "gpu"])
def test_device_that_this_machine_lacks(run_dir: Path, vlattn_cli, command: str, device: str) -> None:
    features = ["--features", str(run_dir.parent / "data" / "features")] if command == "caption" else []
    code, _, err = vlattn_cli(command, "--checkpoint", str(run_dir), "--device", device, *features)
    assert code == 2 and one_line(err) and f"--device {device}" in err.replace("'", "")


def test_karpathy_file_without_the_split(run_dir: Path, tmp_path: Path, vlattn_cli) -> None:
    data = shutil.copytree(run_dir.parent / "data", tmp_path / "data")
    karpathy = json.loads((data / "dataset.json").read_text())
    karpathy["images"] = [image for image in karpathy["images"] if image["split"] != "val"]
    (data / "dataset.json").write_text(json.dumps(karpathy))
    code, _, err = vlattn_cli("eval", "--checkpoint", str(run_dir), "--split", "val", "--data", str(data),
                              "--device", "cpu")
    assert code == 2 and one_line(err) and "dataset.json" in err and "no images in split 'val'" in err
    assert "it has train, test" in err and "features" not in err


def test_eval_records_its_data_root(run_dir: Path, vlattn_cli) -> None:
    code, out, _ = vlattn_cli("eval", "--checkpoint", str(run_dir), "--split", "test", "--json", "--device", "cpu",
                              "--beam-size", "1", "--data", str(run_dir.parent / "data"))
    assert code == 0
    assert json.loads(out)["data_root"] == str((run_dir.parent / "data").resolve())
    saved = json.loads((run_dir / "eval" / "test_metrics.json").read_text())
    assert saved["data_root"] == str((run_dir.parent / "data").resolve())
