"""The confounded variant: realised train co-occurrence near p, val/test near the unconfounded rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vlattn.data.synth import Confound, generate
from vlattn.data.synth.confound import attribute_sampler, cooccurrence
from vlattn.data.synth.scene import sample_scene

CONFOUND = Confound.parse(["red:circle", "large:star"], p=0.9)
PAIRS = (("red:circle", "circle", "colour", 1 / 8), ("large:star", "star", "size", 1 / 2))


def test_sampled_scenes_realise_p_in_train_only() -> None:
    objects = []
    for split in ("train", "val", "test"):
        sampler = attribute_sampler(CONFOUND, split)
        for image_id in range(1500):
            scene = sample_scene(np.random.default_rng([7, image_id]), image_id, split, 80, sampler)
            objects += [(split, o.to_json()) for o in scene.objects]
    stats = cooccurrence(objects, CONFOUND)
    for name, _, _, chance in PAIRS:
        assert abs(stats["train"][name]["rate"] - 0.9) < 0.03
        for split in ("val", "test"):
            assert abs(stats[split][name]["rate"] - chance) < 0.05 and stats[split][name]["unconfounded_rate"] == chance


def test_confound_json_matches_the_generated_scenes(tmp_path: Path) -> None:
    out = generate(tmp_path / "c", images=60, seed=2, confound=CONFOUND, feature_dim=8, extractor_epochs=1)
    report = json.loads((out / "confound.json").read_text())
    assert report["p"] == 0.9 and [(x["attribute"], x["shape"]) for x in report["pairs"]] == list(CONFOUND.pairs)
    images = json.loads((out / "scenes.json").read_text())["images"]
    for name, shape, kind, _ in PAIRS:
        value = name.split(":")[0]
        for split in ("train", "val", "test"):
            objects = [o for im in images if im["split"] == split for o in im["objects"] if o["shape"] == shape]
            assert report["statistics"][split][name]["shape_objects"] == len(objects)
            assert report["statistics"][split][name]["both"] == sum(o[kind] == value for o in objects)
    train = report["statistics"]["train"]["red:circle"]
    assert train["rate"] > 0.7 and train["shape_given_attribute"] is not None
