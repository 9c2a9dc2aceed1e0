"""The bias benchmark's driver (benchmarks/synth_catt.py): every variant's preset and overrides build the model the
row names, and the reproduce commands name each variant with exactly the seeds it was evaluated with."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from vlattn.attention import AdditiveAttention, AdditiveCausalAttention
from vlattn.validation import load_valid_config
from vlattn.models import build_captioner


@pytest.fixture(scope="module")
def driver(import_benchmark):
    return import_benchmark("synth_catt")


def built(driver, key: str):
    _, config, overrides = driver.VARIANTS[key]
    cfg = load_valid_config(config, overrides)
    return cfg, build_captioner(cfg.model, 30)


# variant -> (model kind, image entries, word entries, share, dictionary init); None: no such dictionary
EXPECTED = {
    "base": ("transformer", None, None, None, None),
    "catt": ("catt", 500, 500, True, "kmeans"),
    "wo_init": ("catt", 500, 500, True, "random"),
    "wo_share": ("catt", 500, 500, False, "kmeans"),
    "d100": ("catt", 100, 100, True, "kmeans"),
    "d200": ("catt", 200, 200, True, "kmeans"),
    "d1000": ("catt", 1000, 1000, True, "kmeans"),
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_transformer_variants_build_what_their_rows_name(driver, key: str) -> None:
    kind, image, word, share, init = EXPECTED[key]
    cfg, model = built(driver, key)
    assert cfg.model.kind == kind and (cfg.model.d_model, cfg.model.encoder_layers) == (128, 2)
    # like for like: the dropout of the baseline Transformer, none on the attention weights
    assert (cfg.model.dropout, cfg.model.attention_dropout) == (built(driver, "base")[0].model.dropout, None)
    if image is None:
        assert not any(name.endswith("dictionary.entries") for name, _ in model.named_parameters())
        return
    assert model.encoder.dictionary.entries.shape == (image, 512)  # the synthetic features, no box channels
    assert model.decoder.dictionary.entries.shape == (word, 128)
    assert cfg.model.options["share"] is share
    assert {cfg.model.options[d]["init"] for d in ("image_dictionary", "word_dictionary")} == {init}


def test_updown_variants_differ_only_at_the_top_down_site(driver) -> None:
    base_cfg, base = built(driver, "updown")
    catt_cfg, catt = built(driver, "updown_catt")
    assert type(base.attention) is AdditiveAttention and isinstance(catt.attention, AdditiveCausalAttention)
    assert catt.attention.dictionary.entries.shape == (100, 512) and catt.attention.cross_sample is not None
    assert (base_cfg.train, base_cfg.data) == (catt_cfg.train, catt_cfg.data)


def test_commands_group_the_variants_by_their_seeds(driver) -> None:
    args = argparse.Namespace(data=Path("d"), runs=Path("r"), epochs=6, set=["eval.beam_size=3"])
    commands = driver.driver_commands({"base": [1, 2, 3], "catt": [1, 2, 3], "d100": [1], "wo_init": [1]}, args)
    assert commands == [
        "benchmarks/synth_catt.py --data d --runs r --epochs 6 --seeds 1 2 3 --variants base catt --set eval.beam_size=3",
        "benchmarks/synth_catt.py --data d --runs r --epochs 6 --seeds 1 --variants d100 wo_init --set eval.beam_size=3",
    ]


def test_bias_columns_by_hand(driver, tmp_path: Path) -> None:
    """Image 1: an ambiguous red circle and a clear white star; 2: an ambiguous blue circle and an ambiguous green
    square; 3: a clear green circle (no star); 4: a clear black square. The captions say red of both ambiguous
    circles (right, wrong), red of the ambiguous square (wrong), the clear objects' colours right, and a star in
    image 3 (a circle without a star) but not in 2 (the same) or 4 (neither)."""
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    captions = ["a large red circle and a big white star", "a red circle and a red square",
                "one green circle and one star", "a black square"]
    (run / "eval" / "test_predictions.json").write_text(json.dumps(
        [{"image_id": k, "caption": c} for k, c in enumerate(captions, start=1)]))

    def obj(shape: str, colour: str, ambiguous: bool = False) -> dict:
        return {"shape": shape, "colour": colour, **({"ambiguous": True} if ambiguous else {})}

    scenes = {1: {"objects": [obj("circle", "red", True), obj("star", "white")]},
              2: {"objects": [obj("circle", "blue", True), obj("square", "green", True)]},
              3: {"objects": [obj("circle", "green")]}, 4: {"objects": [obj("square", "black")]}}
    report = {"scores": {"CIDEr": 0.5, "CHAIR_s": 0.1, "CHAIR_i": 0.2, "A@Attr": 0.75}}
    values = driver.measures(run, report, scenes)
    assert values == {**report["scores"], "A@Attr amb. circle": 0.5, "A@Attr amb. other": 0.0, "A@Attr clear": 1.0,
                      "red: amb. circle": 1.0, "red: amb. other": 1.0, "star: circle": 0.5, "star: no circle": 0.0,
                      "amb. circle words": 2}
    assert driver.fmt([3, 5, float("nan")], 1) == "4.0 ± 1.4 (2 seeds)"


def test_main_variants_run_first(driver) -> None:
    assert driver.schedule(["d100", "base", "catt"], [1, 2]) == [("base", 1), ("catt", 1), ("base", 2), ("catt", 2),
                                                                  ("d100", 1), ("d100", 2)]


def test_paired_differences_take_the_seeds_both_have(driver) -> None:
    """catt − base over seeds 1 and 2 (seed 3 only in base): CIDEr differences -0.1 and +0.3."""
    def values(cider: float) -> dict[str, float]:
        return {c: 0.5 for c in driver.COLUMNS} | {"CIDEr": cider}

    results = {"base": {1: values(0.5), 2: values(0.4), 3: values(0.9)}, "catt": {1: values(0.4), 2: values(0.7)}}
    (row,) = driver.paired(results)
    assert row.startswith("| Transformer+CATT (D#500) − Transformer | 2 | 0.100 ± 0.283 | 0.000 ± 0.000 |")
