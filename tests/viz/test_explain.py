"""``vlattn explain`` for every captioning and VQA model kind on a small synthetic set: a page that opens from disk,
every referenced image a PNG beside it, and each mechanism's own panel; refusals in one line."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import torch

from vlattn.data.vocab import Vocabulary
from vlattn.validation import load_valid_config
from vlattn.data.synth.generate import generate
from vlattn.errors import ConfigError, DataError
from vlattn.tasks import load_predictor, task_of
from vlattn.training.checkpoint import save_checkpoint
from vlattn.viz.explain import explain
from vlattn.viz.figures import is_png

TINY = ["model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.encoder_layers=2", "model.decoder_layers=2"]
# preset -> extra overrides and the panels (headings) its mechanism adds
KINDS = {
    "demo": ([], []),
    "m2-demo": (["model.encoder_self_attention.options.slots=4"], ["M2: meshed gates per word",
                                                                   "M2: share of encoder attention on memory slots"]),
    "catt-demo": (["model.options.image_dictionary.size=5", "model.options.word_dictionary.size=5"],
                  ["CATT: in-sample share of the fused output per word", "CATT: most-attended word dictionary entries",
                   "CATT: most-attended image dictionary entries"]),
    "updown-demo": (["model.d_model=16", "model.options.embed_dim=8", "model.options.attention_dim=8"], []),
    "updown-sla-demo": (["model.d_model=16", "model.options.embed_dim=8", "model.options.attention_dim=8"],
                        ["Stacked attention: every unit's map"]),
    "ng-san-demo": ([], ["NG-SAN: geometry bias from region"]),
    "lw-demo": ([], []),
    "updown-catt-demo": (["model.d_model=16", "model.options.embed_dim=8", "model.options.attention_dim=8",
                          "model.decoder_cross_attention.options.dictionary.size=5"],
                         ["CATT: most-attended image dictionary entries"]),
    "vqa-sla-demo": (["model.options.word_dim=8", "model.options.lstm_dim=8", "model.options.fusion_dim=8"],
                     ["Stacked attention over the regions: visual", "Stacked attention over the question: textual"]),
    "vqa-lxmert": (["model.options.object_layers=1", "model.max_positions=32", "data.max_regions=8",
                    "data.questions=vqa/questions_{split}.json", "data.annotations=vqa/annotations_{split}.json",
                    "data.vqa_splits={train: [train], val: [val], test: [test]}", "data.answer_min_count=1"],
                   ["Question-guided attention (last image layer)"]),
    "vqa-demo": (["model.options.word_dim=8"], ["Attention reduction over the regions",
                                                "Question-guided attention (last image layer)"]),
    "vqa-catt-demo": (["model.options.word_dim=8", "model.options.image_dictionary.size=5",
                       "model.options.word_dictionary.size=5"], ["Attention reduction over the regions"]),
}


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synth") / "data"
    generate(root, images=24, val_size=4, test_size=4, feature_dim=32, extractor_epochs=1, grid=6)
    return root


def checkpoint(synth: Path, tmp_path: Path, preset: str, extra: list[str]) -> Path:
    """A randomly initialised model of ``preset`` (shrunk) saved as a checkpoint over the synthetic set."""
    name = "ng-san" if preset == "ng-san-demo" else preset
    overrides = [f"data.root={synth}", "model.feature_dim=32", "data.vocab_min_count=1"]
    if name == "ng-san":  # the full-size NG-SAN preset with the demo data's sizes
        overrides += ["data.karpathy=dataset.json", "data.features=features"]
    kind_tiny = [] if "updown" in preset or preset == "vqa-sla-demo" else TINY  # kinds without Transformer stacks
    captioner = not preset.startswith("vqa")
    cfg = load_valid_config(name, [*overrides, *kind_tiny, *extra, *["model.output_bias=true"] * captioner])
    stage = next(iter(task_of(cfg.task).stages.values()))
    data = stage.load_data(cfg, None)
    model = stage.build_model(cfg, data)
    if captioner:  # like a trained captioner, never choose PAD or BOS as a word (a random one can)
        with torch.no_grad():
            model.output_projection.bias[[Vocabulary.PAD, Vocabulary.BOS]] = -1e4
    return save_checkpoint(tmp_path / "checkpoint", model, cfg, data.vocabularies)


def page_images(page: Path) -> list[str]:
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # no network, no CDN
    return re.findall(r"<img src='([^']+)'", text)


@pytest.mark.parametrize("preset", sorted(KINDS))
def test_every_kind_explains_itself(preset: str, synth: Path, tmp_path: Path) -> None:
    extra, panels = KINDS[preset]
    path = checkpoint(synth, tmp_path, preset, extra)
    question = "what color is the circle?" if preset.startswith("vqa") else None
    page = explain(path, 21, tmp_path / "explain", question=question)
    images = page_images(page)
    assert "regions.png" in images
    for name in images:
        assert is_png((page.parent / name).read_bytes()), name
    text = html.unescape(page.read_text())
    for heading in panels:
        assert heading in text, heading
    if question is None:
        assert "Attention over regions per word" in text or "every unit" in text


def test_refusals(synth: Path, tmp_path: Path) -> None:
    path = checkpoint(synth, tmp_path, "demo", [])
    with pytest.raises(DataError, match="image id 99999 is not in the feature store"):
        explain(path, 99999, tmp_path / "a")
    with pytest.raises(ConfigError, match="a captioning checkpoint answers no questions"):
        explain(path, 21, tmp_path / "b", question="why?")
    (tmp_path / "taken").mkdir()
    with pytest.raises(DataError, match="explain writes a new directory"):
        explain(path, 21, tmp_path / "taken")


@pytest.mark.slow
def test_the_page_renders_in_a_headless_browser(synth: Path, tmp_path: Path) -> None:
    """The page opened from disk by headless Chromium (Debian's `chromium`; skipped where it is not installed)
    shows the pictures: the screenshot is not one flat colour."""
    import shutil
    import subprocess

    import numpy as np
    from PIL import Image

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no headless Chromium installed (apt-get install chromium)")
    page = explain(checkpoint(synth, tmp_path, "demo", []), 21, tmp_path / "explain")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1200,1600", f"--screenshot={shot}", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert pixels.std() > 10  # text and pictures, not a blank page
    assert (pixels < 128).mean() > 0.01  # some dark content (text, boxes, image)


@pytest.mark.parametrize("preset", ["demo", "updown-demo"])
def test_the_caption_explained_is_the_one_the_run_decodes(preset: str, synth: Path, tmp_path: Path) -> None:
    """The run's decoding (beam 3 here) chooses the caption; the page shows it and its words' log-probabilities from
    the steps recorded along it (tests/test_api.py: their sum is the beam's score at length penalty 0)."""
    path = checkpoint(synth, tmp_path, preset, [*KINDS[preset][0], "eval.beam_size=3", "eval.length_penalty=0.0"])
    predictor = load_predictor(path, "cpu")
    (caption,) = predictor.caption(store=synth / "features", ids=[21])
    score = sum(predictor.word_log_probs([caption], store=synth / "features")[0])
    text = html.unescape(explain(path, 21, tmp_path / "explain").read_text())
    assert f"Caption (beam search, beam 3)</h2><p>{caption.text!r}  (log-probability {score:.3f})" in text
