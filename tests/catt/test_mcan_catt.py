"""MCAN+CATT (Fig. 5 on MCAN, the Transformer+CATT rows of Tables 3-4): the in-sample stream is exactly MCAN, the
dictionaries reach the cross-sample stream only, shared layers are one set, the parameters beyond MCAN are the
dictionaries and the classifier's second half, prepare fits both dictionaries (the word dictionary after the word
vectors), the presets build, and a tiny run trains and evaluates through the CLI. The generic VQA battery
(padding, region order, gradients to every parameter, state dicts) runs on the kind and its variants in
tests/models/test_vqa_registry.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from registry_cases import ANSWERS, FEATURE_DIM, VOCAB, tiny_model_config, tiny_vqa_inputs
import yaml
from typer.testing import CliRunner

from tests.training.conftest import make_tiny_vqa_data, tiny_vqa_config
from vlattn.catt.kmeans import weighted_kmeans
from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.models import build_vqa_model
from vlattn.tasks.vqa import TRAIN
from vlattn.training.prepare import module_seed, prepare_model

runner = CliRunner()
K_IMAGE, K_WORD, WORD_DIM, FLAT = 5, 6, 10, 32  # flat_out = 2 d by default (d = 16)


def catt_config(**options):
    return tiny_model_config("mcan_catt", options={"word_dim": WORD_DIM, "image_dictionary": {"size": K_IMAGE},
                                                   "word_dictionary": {"size": K_WORD}, **options})


def build(config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_vqa_model(config, VOCAB, ANSWERS).eval()


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_in_sample_stream_is_mcan() -> None:
    """With MCAN's weights, Z^ (the first half of the classifier's input) is MCAN's fused vector."""
    catt, mcan = build(catt_config()), build(tiny_model_config("mcan", options={"word_dim": WORD_DIM}), seed=3)
    weights = {k: v for k, v in mcan.state_dict().items() if k != "classifier.weight"}  # (A, F) vs (A, 2F)
    missing, unexpected = catt.load_state_dict(weights, strict=False)
    assert not unexpected and sorted(missing) == ["classifier.weight", "image_dictionary.entries",
                                                  "word_dictionary.entries"]
    inputs = tiny_vqa_inputs()
    torch.testing.assert_close(catt.fused(inputs)[:, :FLAT], mcan.fused(inputs))


def test_dictionaries_reach_only_the_cross_sample_stream() -> None:
    model = build(catt_config())
    inputs = tiny_vqa_inputs()
    before = model.fused(inputs)
    with torch.no_grad():
        model.word_dictionary.entries.normal_()
    words_changed = model.fused(inputs)
    with torch.no_grad():
        model.image_dictionary.entries.normal_()
    both_changed = model.fused(inputs)
    for changed, previous in ((words_changed, before), (both_changed, words_changed)):
        torch.testing.assert_close(changed[:, :FLAT], before[:, :FLAT])
        assert not torch.allclose(changed[:, FLAT:], previous[:, FLAT:])


def test_dictionary_entries_enter_as_the_inputs_do() -> None:
    """The word dictionary passes the question LSTM as one-word questions, the image dictionary the image
    projection (zero box channels under box_input)."""
    model = build(replace(catt_config(), box_input=True))
    words, regions = model.dictionary_entries()
    assert words.shape == (1, K_WORD, 16) and regions.shape == (1, K_IMAGE, 16)
    entry = model.word_dictionary.entries[2]
    torch.testing.assert_close(words[0, 2], model.question.lstm(entry[None, None])[0][0, 0])
    box_free = torch.cat([model.image_dictionary.entries[4], torch.zeros(5)])
    torch.testing.assert_close(regions[0, 4], model.image_proj(box_free))


def test_parameters_beyond_mcan() -> None:
    """Shared: the dictionaries (K_img x D_feature + K_word x word_dim) and the classifier's half over X^ (A x F
    for concat; the 2F x F + F projection for concat_linear); unshared adds a second copy of the layers."""
    mcan = build(tiny_model_config("mcan", options={"word_dim": WORD_DIM}))
    dictionaries = K_IMAGE * FEATURE_DIM + K_WORD * WORD_DIM
    assert count(build(catt_config())) == count(mcan) + dictionaries + ANSWERS * FLAT
    assert count(build(catt_config(fusion="concat_linear"))) == count(mcan) + dictionaries + 2 * FLAT * FLAT + FLAT
    shared, separate = build(catt_config()), build(catt_config(share=False))
    assert shared.backbone.cross_encoder is None and shared.backbone.cross_decoder is None
    assert count(separate) == count(shared) + count(shared.backbone.encoder) + count(shared.backbone.decoder)


def test_paper_preset_parameters() -> None:
    """vlattn/presets/vqa-catt.yaml (MCAN-small, dictionaries of 500, shared, concat) against vlattn/presets/vqa-mcan.yaml, on the
    meta device, with VQA v2's 3,129 candidate answers."""
    catt, mcan = load_valid_config("vqa-catt"), load_valid_config("vqa-mcan")
    assert replace(catt.model, kind="mcan", options=mcan.model.options) == mcan.model
    assert replace(catt.train) == mcan.train and catt.data == mcan.data
    with torch.device("meta"):
        extra = count(build_vqa_model(catt.model, 20_000, 3129)) - count(build_vqa_model(mcan.model, 20_000, 3129))
    assert extra == 500 * 2048 + 500 * 300 + 3129 * 1024


def test_prepare_fits_the_word_dictionary_after_the_word_vectors(tmp_path: Path) -> None:
    """k-means over the question words' embeddings weighted by their training counts, read after the question
    encoder's hook wrote the word vectors into them; the image dictionary over the training regions."""
    data_root = make_tiny_vqa_data(tmp_path / "data")
    glove = tmp_path / "vectors.txt"
    glove.write_text("color " + " ".join(["3.0"] * 16) + "\n")
    cfg = tiny_vqa_config(data_root, "model.kind=mcan_catt", f"model.word_vectors={glove}",
                          "model.options.image_dictionary.size=4", "model.options.word_dictionary.size=3")
    torch.manual_seed(0)
    data = TRAIN.load_data(cfg, None)
    model = TRAIN.build_model(cfg, data)
    notes = prepare_model(model, lambda: data.prepare_resources(model, cfg.train.seed))
    assert [note.split(" ")[0] for note in notes] == ["question", "word_dictionary", "image_dictionary"]
    resources = data.prepare_resources(model, cfg.train.seed)
    table = model.question.word_embedding.weight
    assert table[data.words.stoi["color"]].tolist() == [3.0] * 16
    seed_of = torch.Generator().manual_seed(module_seed(cfg.train.seed, "word_dictionary"))
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=seed_of))
    expected = weighted_kmeans(table.detach().numpy(), resources.word_counts.numpy(), 3, seed, threads=1)
    torch.testing.assert_close(model.word_dictionary.entries, torch.from_numpy(expected))
    assert model.image_dictionary.entries.max() > 0.1  # no longer the U(0, 0.01) start


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"share": "maybe"}, r"model\.options\.share: expected bool"),
        ({"word_dictionary": {"size": 0}}, r"model\.options\.word_dictionary\.size: must be >= 1"),
        ({"flat_glimpses": 0}, r"model\.options\.flat_glimpses: must be >= 1"),
        ({"fusion": "sum"}, r"model\.options\.fusion: 'sum' is not one of: concat, concat_linear"),
    ],
)
def test_config_errors_name_the_key_at_load_time(options, message) -> None:
    with pytest.raises(ConfigError, match=message):
        valid_config({"task": "vqa", "model": {"kind": "mcan_catt", "d_model": 16, "num_heads": 2,
                                                   "options": options}})


def test_trains_and_evaluates_through_the_cli(tmp_path: Path) -> None:
    """vlattn train / eval on the tiny VQA data: the dictionaries are fitted in the fresh run (the run log names
    them), saved, and evaluation of the best checkpoint reproduces the training's last validation accuracy."""
    data_root = make_tiny_vqa_data(tmp_path / "data")
    cfg = tiny_vqa_config(data_root, "model.kind=mcan_catt", "train.epochs=3", "model.options.image_dictionary.size=4",
                          "model.options.word_dictionary.size=5")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    run = tmp_path / "run"
    trained = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"])
    assert trained.exit_code == 0, trained.output
    log = (run / "metrics.jsonl").read_text()
    assert "word_dictionary" in log and "image_dictionary" in log
    evaluated = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "val", "--json", "--device", "cpu"])
    assert evaluated.exit_code == 0, evaluated.output
    val = [json.loads(line) for line in log.splitlines() if json.loads(line)["kind"] == "val"]
    assert json.loads(evaluated.stdout)["overall"] == pytest.approx(max(r["accuracy"] for r in val), abs=0.01)
