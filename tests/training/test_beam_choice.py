"""``eval.beam_size: auto``: the beam size is chosen on validation — greedy where greedy captions the val split
better, a beam where beam search does — on crafted generators whose greedy and beam captions are known by hand;
recorded with the best checkpoint after training and used (and reported) by ``vlattn eval``."""

from __future__ import annotations

import json

import pytest
import torch
from registry_cases import MarkovModel

from tests.training.conftest import make_tiny_data, tiny_config
from vlattn import load
from vlattn.validation import load_valid_config
from vlattn.errors import ConfigError, DataError
from vlattn.tasks import EvalRequest, evaluate, format_report, train
from vlattn.tasks.beam_choice import CHOICE_FILE, choose_beam_size, recorded_choice
from vlattn.tasks.captioning import load_caption_data, references_of, score_predictions, validation_choice

GOOD = "a red circle"  # a reference of a val image; the other captions below share no word with any val reference


def markov_captioner(vocab, rows: dict[str, dict[str, float]]) -> MarkovModel:
    """A :class:`MarkovModel` over the data's vocabulary, its table given by words."""
    ids = {"<bos>": vocab.BOS, "<eos>": vocab.EOS, "<unk>": vocab.UNK, **vocab.stoi}
    return MarkovModel({ids[last]: {ids[w]: p for w, p in probs.items()} for last, probs in rows.items()}, len(vocab))


# Greedy takes "star" (0.6) and ends "star <unk>" (0.24); every beam of 2+ keeps "a" and ends "a red circle" (0.4).
BEAM_WINS = {"<bos>": {"star": 0.6, "a": 0.4}, "star": {"<unk>": 0.4, "<eos>": 0.3, "circle": 0.3},
             "<unk>": {"<eos>": 1.0}, "a": {"red": 1.0}, "red": {"circle": 1.0}, "circle": {"<eos>": 1.0}}
# Greedy takes "a" (0.4), then "red" (0.3): "a red circle" (0.12). A beam of 2+ holds "star <unk>" (0.1925) and
# "star" + EOS (0.1575) after two words, ahead of "a red" (0.12), and ends "star <unk>", the most probable caption.
GREEDY_WINS = {"<bos>": {"a": 0.4, "star": 0.35, "<unk>": 0.25}, "a": {"red": 0.3, "green": 0.25, "blue": 0.25,
               "<eos>": 0.2}, "red": {"circle": 1.0}, "circle": {"<eos>": 1.0}, "star": {"<unk>": 0.55, "<eos>": 0.45},
               "<unk>": {"<eos>": 1.0}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = make_tiny_data(tmp_path_factory.mktemp("choice"))
    cfg = tiny_config(root, "eval.beam_size=auto", "eval.beam_candidates=[3, 1, 2]")
    return cfg, load_caption_data(cfg.data)


def constant_cider(data, caption: str) -> float:
    """CIDEr-D of one caption given for every val image (the metric scored directly, without decoding)."""
    references = references_of(data.eval_set("val"))
    report = score_predictions({i: caption for i in references}, references, metrics=("CIDEr",),
                               tokenizer_backend="python")
    return float(report["scores"]["CIDEr"])


def test_constructed_captions_score_as_designed(tiny) -> None:
    _, data = tiny
    assert "star" not in {w for refs in references_of(data.eval_set("val")).values() for r in refs for w in r.split()}
    assert constant_cider(data, GOOD) > 0.1 > constant_cider(data, "star <unk>")


def test_auto_picks_greedy_when_greedy_wins_on_validation(tiny) -> None:
    cfg, data = tiny
    choice = validation_choice(markov_captioner(data.vocab, GREEDY_WINS), cfg, data, torch.device("cpu"))
    assert choice.beam_size == 1
    good, bad = constant_cider(data, GOOD), constant_cider(data, "star <unk>")
    assert choice.scores == pytest.approx({1: good, 2: bad, 3: bad})
    assert (choice.metric, choice.split, choice.images) == ("CIDEr", "val", len(data.entries["val"]))


def test_auto_picks_a_beam_when_beam_wins_on_validation(tiny) -> None:
    cfg, data = tiny
    choice = validation_choice(markov_captioner(data.vocab, BEAM_WINS), cfg, data, torch.device("cpu"))
    good, bad = constant_cider(data, GOOD), constant_cider(data, "star <unk>")
    assert choice.scores == pytest.approx({1: bad, 2: good, 3: good})
    assert choice.beam_size == 2  # beams 2 and 3 tie: the cheaper one


def test_choice_order_and_ties() -> None:
    scores = {1: 0.5, 3: 0.7, 5: 0.7}
    choice = choose_beam_size(scores.__getitem__, [5, 3, 1, 3], metric="CIDEr", split="val", images=4)
    assert choice.beam_size == 3 and list(choice.scores) == [1, 3, 5]
    assert "beam 3 chosen on val CIDEr (beam 1 0.5000, beam 3 0.7000, beam 5 0.7000" in choice.describe()


def test_auto_is_recorded_after_training_and_used_by_eval(tmp_path) -> None:
    cfg = tiny_config(make_tiny_data(tmp_path / "data"), "eval.beam_size=auto", "eval.beam_candidates=[1, 2]",
                      "train.epochs=1")
    run = tmp_path / "run"
    train(cfg, run, device="cpu")
    best = run / "checkpoints" / "best"
    choice = recorded_choice(best)
    assert choice is not None and choice.source == "after training" and set(choice.scores) == {1, 2}
    assert choice.beam_size == max((1, 2), key=lambda k: (choice.scores[k], -k))
    report = evaluate(run, EvalRequest(split="test", device="cpu"))
    assert report["beam_size"] == choice.beam_size and report["beam_choice"] == choice.to_dict()
    assert f"eval.beam_size auto: beam {choice.beam_size} chosen on val CIDEr" in format_report(report)
    assert load(run, device="cpu").beam_size == choice.beam_size  # the Python front door decodes at it too
    # the recorded val scores are those of decoding the val split at each size now
    again = evaluate(run, EvalRequest(split="val", beam_size=2, device="cpu"))
    assert again["beam_size"] == 2 and "beam_choice" not in again
    with_python = score_predictions(
        {int(r["image_id"]): r["caption"] for r in json.loads((run / "eval" / "val_predictions.json").read_text())},
        references_of(load_caption_data(cfg.data).eval_set("val")), metrics=("CIDEr",), tokenizer_backend="python")
    assert with_python["scores"]["CIDEr"] == pytest.approx(choice.scores[2])
    # a resumed run that trains no further keeps the record
    stamp = (best / CHOICE_FILE).stat().st_mtime_ns
    train(None, run, resume=True, device="cpu")
    assert (best / CHOICE_FILE).stat().st_mtime_ns == stamp


def test_malformed_record_is_a_data_error_naming_it(tmp_path) -> None:
    (tmp_path / CHOICE_FILE).write_text('{"beam_size": 2}')
    with pytest.raises(DataError, match=CHOICE_FILE):
        recorded_choice(tmp_path)


@pytest.mark.parametrize("overrides, message", [
    (["eval.beam_size=fast"], "eval.beam_size: expected int or one of: auto, got 'fast'"),
    (["eval.beam_size=0"], "eval.beam_size: must be >= 1"),
    (["eval.beam_candidates=[]"], "eval.beam_candidates: needs at least one"),
    (["eval.beam_size=auto", "train.val_decoding=beam"], "train.val_decoding=beam"),
])
def test_bad_settings_name_the_key(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_valid_config(None, overrides)


def test_cli_beam_size_auto_and_bad_values(tiny_run, vlattn_cli) -> None:
    code, out, err = vlattn_cli("eval", "--checkpoint", str(tiny_run), "--beam-size", "auto", "--split", "test",
                                "--json", "--device", "cpu")
    assert code == 0, err
    report = json.loads(out)
    assert report["beam_choice"]["source"] == "at evaluation"  # the run was trained with a fixed beam size
    assert report["beam_size"] == report["beam_choice"]["beam_size"]
    code, out, err = vlattn_cli("eval", "--checkpoint", str(tiny_run), "--beam-size", "wide")
    assert code == 2 and err.strip() == "error: --beam-size: expected a whole number or auto, got 'wide'"
