"""The public API exported from `vlattn`: presets, load_config, create_model (validated as YAML is) and load ->
Captioner / Answerer, checked against the CLI's code paths and against the model's own teacher-forced
log-probabilities."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import vlattn
from tests.training.conftest import make_tiny_vqa_data, tiny_vqa_config
from vlattn.config import config_to_dict
from vlattn.data.captioning import CaptionEvalSet, collate_eval
from vlattn.data.features import open_store
from vlattn.data.karpathy import ImageEntry
from vlattn.data.vocab import Vocabulary
from vlattn.models import build_captioner
from vlattn.shipped_presets import names, text
from vlattn.tasks import train
from vlattn.tasks.captioning import caption as cli_caption
from vlattn.tasks.vqa import answer as cli_answer

TINY_IDS = [124, 125, 130]  # images of the tiny set's val and test splits


def test_import_is_cheap_and_lists_the_api() -> None:
    code = "import sys, vlattn; print('torch' in sys.modules, sorted(set(dir(vlattn)) & {'load', 'create_model'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False ['create_model', 'load']"


def test_presets_describe_every_shipped_preset() -> None:
    described = vlattn.presets()
    assert list(described) == names() and len(described) >= 31
    assert all(described[name] == yaml.safe_load(text(name))["description"] for name in described)


def test_load_config_takes_override_items_or_a_mapping() -> None:
    items = vlattn.load_config("demo", ["train.epochs=3", "data.vocab_splits=[train, val]", "model.dropout=0"])
    mapping = vlattn.load_config("demo", {"train.epochs": 3, "data.vocab_splits": ["train", "val"], "model.dropout": 0})
    assert config_to_dict(items) == config_to_dict(mapping)
    assert items.train.epochs == 3 and items.model.dropout == 0.0 and items.model.d_model == 128


def test_create_model_builds_the_configured_model() -> None:
    torch.manual_seed(0)
    model = vlattn.create_model("demo", vocab_size=50, d_model=64, num_heads=4)
    torch.manual_seed(0)
    reference = build_captioner(vlattn.load_config("demo", ["model.d_model=64", "model.num_heads=4"]).model, 50,
                                pad_id=Vocabulary.PAD)
    assert model.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    # the word embedding and the (untied) output layer: one row per vocabulary entry, d_model wide
    assert [tuple(p.shape) for p in model.parameters() if 50 in p.shape] == [(50, 64), (50, 64), (50,)]
    assert model.training
    vqa = vlattn.create_model("vqa-demo", vocab_size=30, num_answers=7)
    logits = vqa({"features": torch.randn(2, 3, 512), "boxes": torch.rand(2, 3, 4),
                  "region_mask": torch.ones(2, 3, dtype=torch.bool), "questions": torch.randint(4, 30, (2, 5)),
                  "question_mask": torch.ones(2, 5, dtype=torch.bool)})
    assert tuple(logits.shape) == (2, 7)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: vlattn.create_model("demo", vocab_size=50, dropout=2.0), r"model\.dropout: must be < 1\.0, got 2\.0"),
    (lambda: vlattn.create_model("demo", vocab_size=50, dmodel=8), r"unknown config key model\.dmodel"),
    (lambda: vlattn.create_model("demo", vocab_size=50, overrides={"train.epochs": -1}), r"train\.epochs: must be >= 0"),
    (lambda: vlattn.create_model("demo", vocab_size=50, num_answers=3), r"num_answers: a captioning model"),
    (lambda: vlattn.create_model("vqa-demo", vocab_size=50), r"num_answers: a VQA model needs"),
    (lambda: vlattn.create_model("nosuch", vocab_size=50), r"nosuch: no preset of that name"),
    (lambda: vlattn.load_config("demo", "train.epochs=3"), r"overrides: expected a list"),
])
def test_create_model_refuses_bad_values_naming_them(call, message: str) -> None:
    with pytest.raises(vlattn.ConfigError, match=message):
        call()


def test_a_config_object_is_validated_again() -> None:
    """A Config changed after it was built (attributes are plain) is checked as a whole before a model is built:
    no public path builds a model from an unvalidated config."""
    cfg = vlattn.load_config("demo")
    cfg.model.d_model = 30  # not divisible by the 4 heads
    with pytest.raises(vlattn.ConfigError, match=r"d_model 30 is not divisible by num_heads 4"):
        vlattn.create_model(cfg, vocab_size=50)
    cfg.model.d_model = 32
    assert vlattn.create_model(cfg, vocab_size=50, dropout=0.0) is not None


def teacher_forced_score(captioner: vlattn.Captioner, store: Path, image_id: int, token_ids: list[int]) -> float:
    """The sum of log p(word | prefix, image) over the caption's words and EOS, by one teacher-forced forward
    pass (the training path), not by decoding."""
    entry = ImageEntry(image_id=image_id, split="test", filename="", captions=[], raw=[])
    batch = collate_eval([CaptionEvalSet([entry], open_store(store), captioner.config.data.max_regions)[0]])
    tokens = torch.tensor([[captioner.bos_id, *token_ids, captioner.eos_id]])
    with torch.no_grad():
        log_probs = captioner.model(batch, tokens[:, :-1]).log_softmax(dim=-1)
    return float(log_probs.gather(2, tokens[:, 1:, None]).sum())


def test_captioner_matches_the_cli_and_scores_its_captions(tiny_run: Path) -> None:
    captioner = vlattn.load(tiny_run, device="cpu")
    store = tiny_run.parent / "data" / "features"
    assert isinstance(captioner, vlattn.Captioner)
    assert (captioner.bos_id, captioner.eos_id, captioner.pad_id) == (Vocabulary.BOS, Vocabulary.EOS, Vocabulary.PAD)
    assert (captioner.beam_size, captioner.max_len) == (captioner.config.eval.beam_size, captioner.config.eval.max_len)
    captions = captioner.caption(store=store, ids=TINY_IDS)
    expected = cli_caption(tiny_run, store, TINY_IDS, device="cpu")
    assert [(c.image_id, c.text) for c in captions] == [(row["image_id"], row["caption"]) for row in expected]
    for caption in captions:
        assert caption.tokens == caption.text.split()
        assert caption.token_ids == [captioner.vocab.stoi[word] for word in caption.tokens]
    greedy = captioner.caption(store=store, ids=TINY_IDS, beam_size=1)
    for caption in greedy:  # greedy: the score is the plain sum of the log-probs of the words and EOS
        expected_score = teacher_forced_score(captioner, store, caption.image_id, caption.token_ids)
        assert caption.score == pytest.approx(expected_score, abs=1e-4)


def test_word_log_probs_step_through_any_caption(tiny_run: Path) -> None:
    """Per-word log-probabilities by stepping the model through a caption: they sum to a greedy caption's score, to
    a beam's at length penalty 0, and to the teacher-forced score of a caption no decoder chose; the regions are
    read from the store or given as arrays."""
    captioner = vlattn.load(tiny_run, device="cpu")
    store = tiny_run.parent / "data" / "features"
    greedy = captioner.caption(store=store, ids=TINY_IDS, beam_size=1)
    beams = captioner.caption(store=store, ids=TINY_IDS, beam_size=3, length_penalty=0.0)
    for captions in (greedy, beams):
        values = captioner.word_log_probs(captions, store=store)
        assert [len(v) for v in values] == [len(c.token_ids) + c.ended for c in captions]  # the words and EOS
        assert [sum(v) for v in values] == pytest.approx([c.score for c in captions], abs=1e-4)
    words = [captioner.vocab.stoi[w] for w in ("a", "blue", "a") if w in captioner.vocab.stoi]
    chosen = vlattn.Caption(image_id=TINY_IDS[0], text="", tokens=[], token_ids=words, score=0.0)
    (values,) = captioner.word_log_probs([chosen], store=store)
    assert sum(values) == pytest.approx(teacher_forced_score(captioner, store, TINY_IDS[0], words), abs=1e-4)
    regions = open_store(store).get(TINY_IDS[0])
    boxes = regions.boxes / np.array([regions.width, regions.height] * 2, np.float32)
    (given,) = captioner.word_log_probs([chosen], [regions.features], boxes=[boxes])
    assert given == pytest.approx(values, abs=1e-5)
    with pytest.raises(vlattn.ConfigError, match="features: 1 images for 2 captions"):
        captioner.word_log_probs([chosen, chosen], [regions.features], boxes=[boxes])


def test_features_given_as_arrays_caption_as_the_store_does(tiny_run: Path) -> None:
    """Region arrays (boxes as fractions of the image size) give the captions and scores of the store's regions."""
    captioner = vlattn.load(tiny_run, device="cpu")
    store = open_store(tiny_run.parent / "data" / "features")
    regions = [store.get(i) for i in TINY_IDS]
    features = [torch.from_numpy(r.features) for r in regions]
    boxes = [r.boxes / np.array([r.width, r.height, r.width, r.height], np.float32) for r in regions]
    from_arrays = captioner.caption(features, boxes=boxes, ids=TINY_IDS)
    from_store = captioner.caption(store=store, ids=TINY_IDS)
    assert [(c.text, c.token_ids) for c in from_arrays] == [(c.text, c.token_ids) for c in from_store]
    assert [c.score for c in from_arrays] == pytest.approx([c.score for c in from_store], abs=1e-5)
    features[0].fill_(0.0)  # the captioner copied the arrays: changing them afterwards changes nothing
    assert captioner.caption(store=store, ids=TINY_IDS) == from_store


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "give either features"),
    ({"features": np.zeros((2, 3)), "store": "x"}, "give either features"),
    ({"features": np.zeros((2, 3), np.float32)}, r"model\.feature_dim=16 but the feature store holds 3-d"),
    ({"features": np.zeros((2, 16), np.float32), "boxes": np.zeros((3, 4))}, r"boxes of image 0: expected shape \(2, 4\)"),
    ({"features": np.zeros((2, 16), np.float32), "beam_size": 0}, r"must be at least 1"),
])
def test_captioner_input_errors_are_named(tiny_run: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(vlattn.VlattnError, match=message):
        vlattn.load(tiny_run, device="cpu").caption(**kwargs)


@pytest.fixture(scope="module")
def vqa_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api-vqa")
    train(tiny_vqa_config(make_tiny_vqa_data(root / "data"), "train.epochs=3"), root / "run", device="cpu")
    return root / "run"


def test_answerer_matches_the_cli(vqa_run: Path) -> None:
    answerer = vlattn.load(vqa_run, device="cpu")
    store = vqa_run.parent / "data" / "features"
    assert isinstance(answerer, vlattn.Answerer) and answerer.answers.itos
    questions = ["What color is the object?", "What shape is it?"]
    got = answerer.answer(questions, store=store, ids=[130], top=3)  # two questions about one image
    for question, answers in zip(questions, got):
        expected = cli_answer(vqa_run, store, 130, question, top=3, device="cpu")["answers"]
        assert [a.answer for a in answers] == [row["answer"] for row in expected]
        assert [a.score for a in answers] == pytest.approx([row["score"] for row in expected], abs=1e-6)
        assert [a.score for a in answers] == sorted((a.score for a in answers), reverse=True)
    one_each = answerer.answer(questions[0], store=store, ids=[124, 130])  # one question about every image
    assert len(one_each) == 2 and all(len(answers) == answerer.top for answers in one_each)
    assert [a.answer for a in one_each[1][:3]] == [a.answer for a in got[0]]  # the same question and image
    assert [a.score for a in one_each[1][:3]] == pytest.approx([a.score for a in got[0]], abs=1e-5)
    with pytest.raises(vlattn.DataError, match="2 questions for 3 images"):
        answerer.answer(questions, store=store, ids=[124, 125, 130])


def test_word_log_probs_of_empty_captions_cut_at_max_len(tiny_run: Path) -> None:
    """A caption cut before any word (no EOS: nothing was chosen) has no log-probabilities; beside another it takes
    no step of its own."""
    captioner = vlattn.load(tiny_run, device="cpu")
    store = tiny_run.parent / "data" / "features"
    empty = vlattn.Caption(image_id=TINY_IDS[0], text="", tokens=[], token_ids=[], score=0.0, ended=False)
    assert captioner.word_log_probs([empty], store=store) == [[]]
    (greedy,) = captioner.caption(store=store, ids=TINY_IDS[1:2], beam_size=1)
    alone = captioner.word_log_probs([greedy], store=store)
    together = captioner.word_log_probs([empty, greedy], store=store)
    assert together[0] == [] and together[1] == pytest.approx(alone[0], abs=1e-5)
