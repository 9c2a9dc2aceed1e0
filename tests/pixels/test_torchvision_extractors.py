"""The grid and regions extractors (randomly initialised torchvision networks, tiny inputs) end to end: a folder of
JPEG and PNG files -> a feature store -> captioning and VQA runs -> captions and answers of image files equal to
those of the stored features; the boxes, classes and scores the regions extractor keeps; refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vlattn.config import apply_overrides
from vlattn.data.features import open_store
from vlattn.data.features.record import store_extractor
from vlattn.pixels.images import load_image
from vlattn.pixels.registry import build_extractor
from vlattn.pixels.weights import WeightSource
from tests.pixels.test_synth_round_trip import caption_config, train, vqa_config

import torch

SETTINGS = {
    "grid": ["arch=resnet18", "size=64", "grid=3"],
    "regions": ["min_size=64", "max_size=64", "min_boxes=3", "max_boxes=6", "score_threshold=0.5"],
}
DIMS = {"grid": 512, "regions": 2048}


@pytest.fixture(scope="module", params=["grid", "regions"])
def extracted(request: pytest.FixtureRequest, photos: Path, synth_set: Path) -> tuple[str, Path]:
    """The photos extracted by one extractor into ``DATA/feat_<name>`` (npz-dir: float32, as computed)."""
    from typer.testing import CliRunner

    from vlattn.cli import app

    name = request.param
    out = synth_set / f"feat_{name}"
    args = ["features", "extract", "--images", str(photos), "--out", str(out), "--extractor", name, "--weights",
            "random:1", "--format", "npz-dir", "--batch", "4", "--workers", "2", "--no-progress", "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, *[f"--set={s}" for s in SETTINGS[name]]])
    assert result.exit_code == 0, result.output
    return name, out


def test_every_photo_is_extracted_with_its_record(extracted: tuple[str, Path], photos: Path) -> None:
    name, out = extracted
    store = open_store(out)
    assert store.ids() == list(range(1, 31)) and store.dim == DIMS[name]
    record = store_extractor(out)
    assert record["name"] == name and record["dim"] == DIMS[name]
    assert record["weights"]["source"] == "random" and record["weights"]["seed"] == 1
    again = build_extractor(name, WeightSource("random", seed=1), apply_overrides({}, SETTINGS[name]),
                            torch.device("cpu"))
    assert again.sha256 == record["weights"]["sha256"]  # the same seed builds the same weights
    regions = store.get(7)
    assert (regions.width, regions.height) == (48, 48)
    if name == "grid":  # 3 x 3 cells of 16 pixels, row by row
        assert regions.num_regions == 9
        np.testing.assert_array_equal(regions.boxes[:4], [[0, 0, 16, 16], [16, 0, 32, 16], [32, 0, 48, 16],
                                                          [0, 16, 16, 32]])
    else:
        classes, scores = store.detections(7)
        assert 3 <= regions.num_regions <= 6 and len(classes) == len(scores) == regions.num_regions
        assert np.all(np.diff(scores) <= 0) and np.all((classes >= 1) & (classes <= 90))
        # a random detector scores about 1/91 per class: under the 0.5 threshold, so min_boxes are kept
        assert regions.num_regions == 3
        assert np.all(regions.boxes >= 0) and np.all(regions.boxes[:, 2:] <= 48)


def test_features_of_a_file_are_those_in_the_store(extracted: tuple[str, Path], photos: Path) -> None:
    name, out = extracted
    record = store_extractor(out)
    from vlattn.pixels.registry import extractor_from_record

    extractor = extractor_from_record(record, torch.device("cpu"))
    (found,) = extractor([load_image(photos / "photo_7.jpg", max_side=extractor.max_side)])
    stored = open_store(out).get(7)
    np.testing.assert_allclose(found.features, stored.features, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(found.boxes, stored.boxes, rtol=1e-5, atol=1e-4)


@pytest.fixture(scope="module")
def runs(extracted: tuple[str, Path], synth_set: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    name, out = extracted
    root = tmp_path_factory.mktemp(f"runs-{name}")
    return (train(caption_config(synth_set, out.name, DIMS[name]), root / "caption"),
            train(vqa_config(synth_set, out.name, DIMS[name]), root / "vqa"))


def test_captions_and_answers_of_jpeg_and_png_files(extracted: tuple[str, Path], runs: tuple[Path, Path],
                                                    photos: Path, vlattn_cli) -> None:
    name, out = extracted
    captioner, answerer = runs
    files = [photos / "photo_7.jpg", photos / "photo_8.png"]
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(captioner), "--features", str(out), "--ids=7",
                                      "--ids=8", "--device", "cpu")
    assert code == 0, stderr
    from_store = [row["caption"] for row in json.loads(stdout)]
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(captioner), "--extractor", name,
                                      *[f"--images={f}" for f in files], "--device", "cpu")
    assert code == 0, stderr
    assert [row["caption"] for row in json.loads(stdout)] == from_store and all(from_store)
    question = "is there a red square?"
    code, stdout, stderr = vlattn_cli("answer", "--checkpoint", str(answerer), "--features", str(out), "--image-id",
                                      "7", "--question", question, "--json", "--device", "cpu")
    assert code == 0, stderr
    expected = json.loads(stdout)["answers"]
    code, stdout, stderr = vlattn_cli("answer", "--checkpoint", str(answerer), "--image", str(files[0]),
                                      "--question", question, "--json", "--device", "cpu")
    assert code == 0, stderr
    answers = json.loads(stdout)["answers"]
    assert [a["answer"] for a in answers] == [a["answer"] for a in expected]
    other = "synth" if name != "synth" else "grid"
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(captioner), "--extractor", other,
                                      f"--images={files[0]}", "--device", "cpu")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert f"--extractor {other}: the run was trained on '{name}' features" in stderr
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(captioner), "--weights", "random:2",
                                      f"--images={files[0]}", "--device", "cpu")
    assert code == 2 and stderr.count("\n") == 1 and "but the features were made with" in stderr
