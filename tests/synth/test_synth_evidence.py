"""The bias benchmark's confound (vlattn/data/synth/cooccur.py, evidence.py): realised co-occurrence, ambiguity and
miss rates per split; ambiguous objects' features do not carry their colour; bad options are ConfigErrors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vlattn.data.features import open_store
from vlattn.data.synth import Confound, generate
from vlattn.data.synth.confound import attribute_sampler
from vlattn.data.synth.cooccur import cooccurrence_statistics, impose_cooccurrence
from vlattn.data.synth.evidence import evidence_statistics
from vlattn.data.synth.lexicon import COLOURS
from vlattn.data.synth.sample import confounded_scene
from vlattn.data.synth.scene import SceneObject, cell_of, sample_scene
from vlattn.errors import ConfigError

BIAS = Confound.parse(["red:circle"], 0.9, cooccur=["circle:star"], cooccur_p=0.9, ambiguous=0.5, missed=0.5)


def test_realised_rates_per_split() -> None:
    """Train: P(star | circle) ~ 0.9 while P(star | no circle) keeps the independent rate; val/test: independent;
    every split: half the objects ambiguous, half the stars missed."""
    shapes, seen = [], []
    for split in ("train", "test"):
        sampler = attribute_sampler(BIAS, split)
        for image_id in range(1500):
            rng = np.random.default_rng([11, image_id])
            scene, missed = confounded_scene(sample_scene(rng, image_id, split, 80, sampler), BIAS, sampler, rng)
            shapes.append((split, {o.shape for o in scene.objects}))
            seen.append((split, [o.to_json() for o in scene.objects], set(range(len(scene.objects))) - missed))
    pairs = cooccurrence_statistics(shapes, BIAS.cooccur)
    train, test = pairs["train"]["circle:star"], pairs["test"]["circle:star"]
    assert abs(train["rate"] - 0.9) < 0.04
    # independent shapes: P(star | no circle) is the same in both splits, and at test P(star | circle) is near it
    assert abs(train["rate_without"] - test["rate_without"]) < 0.05
    assert abs(test["rate"] - test["rate_without"]) < 0.1 and test["rate"] < 0.6
    evidence = evidence_statistics(seen, ["star"])
    for split in ("train", "test"):
        assert abs(evidence[split]["ambiguous_rate"] - 0.5) < 0.03
        assert abs(evidence[split]["missed"]["star"]["missed_rate"] - 0.5) < 0.05


def test_imposing_cooccurrence_by_hand() -> None:
    """p = 1 turns a non-circle into a star (its box kept); p = 0 turns stars into shapes that are neither; an
    image of circles only gains a star in a free cell."""
    sampler = attribute_sampler(None, "train")
    rng = np.random.default_rng(0)
    circle, square = SceneObject("circle", "red", "small", (2, 2, 14, 14)), SceneObject("square", "blue", "large",
                                                                                         (30, 30, 50, 50))
    made = impose_cooccurrence([circle, square], ("circle", "star"), 1.0, rng, sampler, 80)
    assert made[0] == circle and (made[1].shape, made[1].box, made[1].size) == ("star", square.box, "large")
    star = SceneObject("star", "white", "small", (60, 60, 70, 70))
    kept = impose_cooccurrence([circle, star], ("circle", "star"), 0.0, rng, sampler, 80)
    assert kept[0] == circle and kept[1].shape not in ("circle", "star") and kept[1].box == star.box
    assert impose_cooccurrence([square, star], ("circle", "star"), 0.0, rng, sampler, 80) == [square, star]
    added = impose_cooccurrence([circle], ("circle", "star"), 1.0, rng, sampler, 80)
    assert [o.shape for o in added] == ["circle", "star"] and cell_of(added[1], 80) != cell_of(circle, 80)


@pytest.fixture(scope="module")
def shadowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small set with half of the objects in shadow at contrast 0 (colours uniform: no colour confound)."""
    confound = Confound.parse([], cooccur=["circle:star"], ambiguous=0.5, missed=0.5)
    return generate(tmp_path_factory.mktemp("evidence") / "d", images=160, seed=4, confound=confound, feature_dim=32,
                    val_size=10, test_size=50, extractor_epochs=6)


def nearest_centroid(features: np.ndarray, labels: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The label whose mean feature is nearest to each query (labels absent from ``labels`` are never chosen)."""
    classes = np.unique(labels)
    centroids = np.stack([features[labels == c].mean(0) for c in classes])
    return classes[((queries[:, None, :] - centroids[None]) ** 2).sum(-1).argmin(1)]


def test_ambiguous_objects_features_do_not_carry_their_colour(shadowed: Path) -> None:
    """A colour probe fitted on the train split's features reads clear test objects' colours, but on ambiguous
    ones (fitted on ambiguous train objects with their true colours) does no better than chance (1/8)."""
    store, scenes = open_store(shadowed / "features"), json.loads((shadowed / "scenes.json").read_text())["images"]
    rows: dict[tuple[str, bool], tuple[list, list]] = {}
    for image in scenes:
        features = store.get(image["image_id"]).features
        for region, feature in zip(image["regions"], features):
            if region["object"] is None:
                continue
            obj = image["objects"][region["object"]]
            cell = rows.setdefault((image["split"] != "test", bool(obj.get("ambiguous"))), ([], []))
            cell[0].append(feature)
            cell[1].append(list(COLOURS).index(obj["colour"]))
    accuracy = {}
    for ambiguous in (False, True):
        (fit_x, fit_y), (test_x, test_y) = rows[True, ambiguous], rows[False, ambiguous]
        guess = nearest_centroid(np.array(fit_x, np.float64), np.array(fit_y), np.array(test_x, np.float64))
        accuracy[ambiguous] = float((guess == np.array(test_y)).mean())
    assert accuracy[False] > 0.8 and accuracy[True] < 0.3, accuracy
    report = json.loads((shadowed / "scenes.json").read_text())["info"]["extractor"]["heldout_colour_accuracy"]
    assert report["clear"] > 0.6 and report["ambiguous"] < 0.3  # the extractor's own colour head (briefly trained)


def test_missed_stars_have_no_region_and_every_image_keeps_one(shadowed: Path) -> None:
    scenes = json.loads((shadowed / "scenes.json").read_text())["images"]
    report = json.loads((shadowed / "confound.json").read_text())
    stars = missed = 0
    for image in scenes:
        detected = {r["object"] for r in image["regions"] if r["object"] is not None}
        assert image["regions"]
        for k, obj in enumerate(image["objects"]):
            assert k in detected or obj["shape"] == "star"
            stars += obj["shape"] == "star"
            missed += k not in detected
    counted = [report["evidence"][s]["missed"]["star"] for s in ("train", "val", "test")]
    assert (sum(c["objects"] for c in counted), sum(c["missed"] for c in counted)) == (stars, missed) and missed > 0
    assert report["ambiguous"] == 0.5 and report["cooccur"] == [{"shape": "circle", "with": "star"}]


@pytest.mark.parametrize("options", [
    {"cooccur": ["circle"]}, {"cooccur": ["circle:blob"]}, {"cooccur": ["circle:circle"]},
    {"cooccur": ["circle:star", "star:square"]}, {"cooccur": ["circle:star"], "ambiguous": 1.5},
    {"cooccur": ["circle:star"], "cooccur_p": -0.1}, {"cooccur": ["circle:star"], "contrast": 2.0},
    {"cooccur": ["circle:star"], "missed": 1.1}, {"specs": ["red:circle"], "missed": 0.5},
    {"specs": ["large:circle"], "cooccur": ["circle:star"]}, {},
])
def test_bad_options_are_one_line_config_errors(options: dict) -> None:
    with pytest.raises(ConfigError) as error:
        Confound.parse(options.pop("specs", []), **options)
    assert "\n" not in str(error.value)
