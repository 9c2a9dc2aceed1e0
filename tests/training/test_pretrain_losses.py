"""LXMERT's pretraining losses and corruptions (vlattn/training/pretraining.py, vlattn/data/masking.py): each loss
against a value computed by hand on tiny inputs; the heads and the released code's weighting against transformers'
``LxmertForPreTraining`` with copied weights (built from ``LxmertConfig``, never downloaded); the statistics of word
and region masking (15%, BERT's 80/10/10, never a special or padded item); mismatched pairs; the options'
paper and released-code readings."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LxmertConfig, LxmertForPreTraining

from vlattn.config import ModelConfig, parse_options
from vlattn.data.masking import draw_mismatches, mask_regions, mask_words
from vlattn.data.pretraining import IGNORE
from vlattn.errors import ConfigError
from vlattn.importers.lxmert_names import head_names, parameter_names
from vlattn.models.lxmert import build_lxmert
from vlattn.models.pretraining import PretrainingHeads, PretrainingModel
from vlattn.training.pretraining import (
    PretrainOptions,
    Targets,
    Vocabulary,
    answer_loss,
    corrupt,
    feature_loss,
    label_loss,
    masked_lm_loss,
    matching_loss,
    pretrain_losses,
    reduce_regions,
    total_loss,
)

LN2 = math.log(2.0)


# --- each loss by hand ------------------------------------------------------------------------------------------


def test_masked_lm_loss_is_the_mean_over_the_masked_pieces() -> None:
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]]])  # (1, 3, 2)
    labels = torch.tensor([[0, 1, IGNORE]])
    # piece 0: -log(1/2) = ln 2; piece 1: -log(1/(3 + 1)) = 2 ln 2; piece 2 not masked
    assert masked_lm_loss(logits, labels).item() == pytest.approx(1.5 * LN2, abs=1e-6)
    assert masked_lm_loss(logits, torch.full((1, 3), IGNORE)).item() == 0.0  # nothing masked: no loss, no NaN


def test_matching_and_answer_losses_by_hand() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]])
    # matched (1) with p = 3/4, mismatched (0) with p = 3/4
    assert matching_loss(logits, torch.tensor([1, 0])).item() == pytest.approx(math.log(4 / 3), abs=1e-6)
    answers = torch.tensor([[0.0, 0.0, 0.0, 0.0], [math.log(5.0), 0.0, 0.0, 0.0], [9.0, 0.0, 0.0, 0.0]])
    # row 0: answer 2 at 1/4; row 1: answer 0 at 5/8; row 2: no answer
    expected = (math.log(4.0) + math.log(8 / 5)) / 2
    assert answer_loss(answers, torch.tensor([2, 0, IGNORE])).item() == pytest.approx(expected, abs=1e-6)
    assert answer_loss(answers, torch.full((3,), IGNORE)).item() == 0.0


def test_feature_regression_l2_and_smooth_l1_by_hand() -> None:
    predicted = torch.tensor([[[1.0, 2.0], [0.5, -0.5]]])  # (1, 2, 2)
    target = torch.zeros(1, 2, 2)
    # squared error averaged over D: (1 + 4) / 2, (0.25 + 0.25) / 2
    torch.testing.assert_close(feature_loss(predicted, target, "l2"), torch.tensor([[2.5, 0.25]]))
    # smooth L1 (beta 1): |x| - 0.5 above 1, x^2 / 2 below: (0.5 + 1.5) / 2, (0.125 + 0.125) / 2
    torch.testing.assert_close(feature_loss(predicted, target, "smooth_l1"), torch.tensor([[1.0, 0.125]]))


def test_label_loss_and_the_two_region_averages_by_hand() -> None:
    logits = torch.zeros(1, 3, 4)  # uniform over 4 classes: ln 4 per labelled region
    per_region = label_loss(logits, torch.tensor([[1, IGNORE, 3]]))
    torch.testing.assert_close(per_region, torch.tensor([[2 * LN2, 0.0, 2 * LN2]]))
    losses = torch.tensor([[2.0, 4.0, 6.0]])
    # the paper's: mean over the masked regions (weights 1 at the masked ones)
    assert reduce_regions(losses, torch.tensor([[1.0, 0.0, 1.0]]), "masked").item() == pytest.approx(4.0)
    # the released code's: sum of loss x detector confidence over every region / the number of regions
    assert reduce_regions(losses, torch.tensor([[0.5, 1.0, 0.0]]), "confidence").item() == pytest.approx(5 / 3)
    assert reduce_regions(losses, torch.zeros(1, 3), "masked").item() == 0.0  # nothing masked


def test_total_loss_weights_the_visual_losses_and_gates_qa() -> None:
    losses = {name: torch.tensor(float(k)) for k, name in enumerate(
        ["words", "matching", "feature", "object", "attribute", "answers"], start=1)}
    settings = PretrainOptions(visual_weight=10.0).resolved()
    assert total_loss(losses, settings, with_answers=True).item() == pytest.approx(1 + 2 + 10 * (3 + 4 + 5) + 6)
    assert total_loss(losses, settings, with_answers=False).item() == pytest.approx(1 + 2 + 10 * (3 + 4 + 5))


# --- the options: paper by default, the released code with `official` ----------------------------------------------


def test_paper_and_released_readings() -> None:
    paper = PretrainOptions().resolved()
    assert (paper.region_masking, paper.feature_loss, paper.label_regions, paper.visual_weight, paper.qa_from) == \
        ("zero", "l2", "masked", 1.0, 0.5)
    assert paper.answers_from_epoch(20) == 10  # image QA in the last 10 of 20 epochs
    code = PretrainOptions(official=True).resolved()
    assert (code.region_masking, code.feature_loss, code.label_regions, code.qa_from) == \
        ("bert", "smooth_l1", "confidence", 0.0)
    assert code.visual_weight == pytest.approx(1 / 0.15)
    mixed = PretrainOptions(official=True, feature_loss="l2").resolved()  # an explicit choice wins
    assert mixed.feature_loss == "l2" and mixed.region_masking == "bert"


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "unknown config key train.pretrain.bogus"),
    ({"tasks": ["words", "nope"]}, "train.pretrain.tasks"),
    ({"tasks": []}, "train.pretrain.tasks"),
    ({"visual_losses": ["feature", "feature"]}, "train.pretrain.visual_losses"),
    ({"region_masking": "mask"}, "train.pretrain.region_masking"),
    ({"word_mask_rate": 0.0}, "train.pretrain.word_mask_rate"),
    ({"mismatch_rate": 1.5}, "train.pretrain.mismatch_rate"),
    ({"captions": False, "questions": False}, "train.pretrain.captions/questions"),
])
def test_bad_options_are_refused_naming_the_key(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_options(PretrainOptions, options, "train.pretrain")


# --- masking statistics ------------------------------------------------------------------------------------------------


def vocabulary(size: int = 1000) -> Vocabulary:
    """ids 0-4: [PAD] [UNK] [CLS] [SEP] [MASK]; the rest are words."""
    return Vocabulary(mask=4, pad=0, replacements=torch.arange(5, size), specials=torch.arange(5))


def test_word_masking_statistics() -> None:
    g = torch.Generator().manual_seed(0)
    vocab = vocabulary()
    ids = torch.randint(5, 1000, (400, 40), generator=g)
    ids[:, 0], ids[:, 30] = 2, 3  # [CLS] ... [SEP], then padding
    ids[:, 31:] = 0
    maskable = (ids != 0) & ~torch.isin(ids, vocab.specials)
    out, labels = mask_words(ids, maskable, rate=0.15, mask_id=vocab.mask, replacements=vocab.replacements, generator=g)
    chosen = labels != IGNORE
    # 400 x 29 = 11,600 maskable pieces: the shares lie within 4 standard deviations of 15% and 80/10/10
    assert abs(chosen.sum() / maskable.sum() - 0.15) < 4 * math.sqrt(0.15 * 0.85 / 11_600)
    assert not (chosen & ~maskable).any()  # never [CLS], [SEP] or [PAD]
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(out[~chosen], ids[~chosen])
    n = int(chosen.sum())
    masked = (out == vocab.mask) & chosen
    kept = (out == ids) & chosen
    replaced = chosen & ~masked & ~kept
    sd = math.sqrt(0.1 * 0.9 / n)
    assert abs(masked.sum() / n - 0.8) < 4 * math.sqrt(0.8 * 0.2 / n)
    # a random replacement equals the original piece with probability 1/995: "kept" is 0.1 + 0.1/995
    assert abs(kept.sum() / n - (0.1 + 0.1 / 995)) < 4 * sd and abs(replaced.sum() / n - 0.1) < 4 * sd
    assert not torch.isin(out[replaced], vocab.specials).any()  # never a special piece as the random one


@pytest.mark.parametrize("mode", ["zero", "bert"])
def test_region_masking_statistics(mode: str) -> None:
    g = torch.Generator().manual_seed(1)
    features = torch.rand(300, 12, 6, generator=g) + 0.5  # positive: a zero row is a masked one
    region_mask = torch.ones(300, 12, dtype=torch.bool)
    region_mask[:, 9:] = False  # 3 padded regions per image
    out, chosen = mask_regions(features, region_mask, rate=0.15, mode=mode, generator=g)
    real = int(region_mask.sum())
    assert abs(chosen.sum() / real - 0.15) < 4 * math.sqrt(0.15 * 0.85 / real)
    assert not (chosen & ~region_mask).any()
    assert torch.equal(out[~chosen], features[~chosen])
    zeros = (out == 0).all(-1) & chosen
    n = int(chosen.sum())
    if mode == "zero":
        assert bool(zeros[chosen].all())
        return
    kept = (out == features).all(-1) & chosen
    swapped = chosen & ~zeros & ~kept
    assert abs(zeros.sum() / n - 0.8) < 4 * math.sqrt(0.16 / n)
    assert abs(kept.sum() / n - 0.1) < 4 * math.sqrt(0.09 / n) and abs(swapped.sum() / n - 0.1) < 4 * math.sqrt(0.09 / n)
    pool = features[region_mask]  # a swapped region holds some real region's feature
    assert all(bool((pool == row).all(-1).any()) for row in out[swapped])


def test_mismatches_are_of_other_images_for_about_half_of_the_pairs() -> None:
    g = torch.Generator().manual_seed(2)
    pool = torch.randint(0, 50, (5000,), generator=g)
    images = torch.randint(0, 50, (4000,), generator=g)
    others = draw_mismatches(images, pool, rate=0.5, generator=g)
    drawn = others >= 0
    assert abs(drawn.float().mean() - 0.5) < 4 * math.sqrt(0.25 / 4000)
    assert not (pool[others[drawn]] == images[drawn]).any()
    lonely = draw_mismatches(torch.tensor([7, 7]), torch.tensor([7, 7, 7]), rate=1.0, generator=g)
    assert lonely.tolist() == [-1, -1]  # no sentence of another image: the pair stays matched


class Pool:
    """Three pairs: image 1 ("5 6"), image 2 ("7 8 9"), image 3 ("10")."""

    image_ids = torch.tensor([1, 2, 3])
    texts = [[2, 5, 6, 3], [2, 7, 8, 9, 3], [2, 10, 3]]

    def text(self, index: int) -> list[int]:
        return self.texts[index]


def test_corrupt_swaps_sentences_and_drops_the_answer_of_mismatched_pairs() -> None:
    settings = PretrainOptions(tasks=["matching", "answers"], mismatch_rate=1.0).resolved()
    batch = {"questions": torch.tensor([[2, 5, 6, 3], [2, 10, 3, 0]]), "image_ids": torch.tensor([1, 3]),
             "features": torch.rand(2, 2, 3), "region_mask": torch.ones(2, 2, dtype=torch.bool),
             "answers": torch.tensor([[0.0, 1.0], [0.3, 0.0]]),
             "objects": torch.zeros(2, 2, dtype=torch.long), "attributes": torch.zeros(2, 2, dtype=torch.long),
             "object_scores": torch.ones(2, 2), "attribute_scores": torch.ones(2, 2)}
    inputs, targets = corrupt(batch, settings, Pool(), vocabulary(), torch.Generator().manual_seed(0))
    assert targets.matched.tolist() == [0, 0]
    sentences = [row[row != 0].tolist() for row in inputs["questions"]]
    assert sentences[0] in Pool.texts[1:] and sentences[1] in Pool.texts[:2]  # another image's sentence
    assert torch.equal(inputs["question_mask"], inputs["questions"] != 0)
    assert targets.answers.tolist() == [IGNORE, IGNORE]  # no QA for a mismatched pair
    matched = PretrainOptions(tasks=["matching", "answers"], mismatch_rate=0.0).resolved()
    inputs, targets = corrupt(batch, matched, Pool(), vocabulary(), torch.Generator().manual_seed(0))
    assert targets.matched.tolist() == [1, 1] and torch.equal(inputs["questions"], batch["questions"])
    assert targets.answers.tolist() == [1, 0]  # the one answer with a positive score


# --- against transformers' LxmertForPreTraining ------------------------------------------------------------------------

SIZE = dict(vocab=40, d=32, heads=4, d_ff=48, language=2, objects=1, cross=2, features=10, positions=24)
OBJECTS, ATTRIBUTES, ANSWERS = 9, 7, 5


def hf_reference() -> LxmertForPreTraining:
    torch.manual_seed(0)
    config = LxmertConfig(
        vocab_size=SIZE["vocab"], hidden_size=SIZE["d"], num_attention_heads=SIZE["heads"],
        intermediate_size=SIZE["d_ff"], l_layers=SIZE["language"], r_layers=SIZE["objects"], x_layers=SIZE["cross"],
        visual_feat_dim=SIZE["features"], max_position_embeddings=SIZE["positions"], num_qa_labels=ANSWERS,
        num_object_labels=OBJECTS, num_attr_labels=ATTRIBUTES, task_mask_lm=True, task_obj_predict=True,
        task_matched=True, task_qa=True, visual_obj_loss=True, visual_attr_loss=True, visual_feat_loss=True)
    return LxmertForPreTraining(config).eval()


def copied(reference: LxmertForPreTraining) -> PretrainingModel:
    """vlattn's pretraining model with the reference's weights (the word table tied in both)."""
    cfg = ModelConfig(kind="lxmert", feature_dim=SIZE["features"], d_model=SIZE["d"], num_heads=SIZE["heads"],
                      d_ff=SIZE["d_ff"], encoder_layers=SIZE["language"], decoder_layers=SIZE["cross"],
                      max_positions=SIZE["positions"], options={"object_layers": SIZE["objects"]})
    model = PretrainingModel(build_lxmert(cfg, SIZE["vocab"], ANSWERS),
                             PretrainingHeads(SIZE["d"], SIZE["vocab"], OBJECTS, ATTRIBUTES, SIZE["features"], 1e-12))
    state = reference.state_dict()
    names = {f"lxmert.{old}": f"backbone.{new}"
             for old, new in parameter_names(SIZE["language"], SIZE["objects"], SIZE["cross"]).items()}
    names.update({f"answer_head.logit_fc.{old}": f"backbone.{new}" for old, new in head_names().items()})
    for source, target in (("cls.predictions.transform", "heads.words.transform"),
                           ("obj_predict_head.transform", "heads.regions.transform")):
        names.update({f"{source}.{a}.{t}": f"{target}.{b}.{t}" for a, b in (("dense", 0), ("LayerNorm", 2))
                      for t in ("weight", "bias")})
    names["cls.predictions.bias"] = "heads.words.bias"
    names.update({f"cls.seq_relationship.{t}": f"heads.matching.{t}" for t in ("weight", "bias")})
    names.update({f"obj_predict_head.decoder_dict.{a}.{t}": f"heads.regions.{b}.{t}"
                  for a, b in (("obj", "objects"), ("attr", "attributes"), ("feat", "features"))
                  for t in ("weight", "bias")})
    assert set(state) - set(names) == {"cls.predictions.decoder.weight"}  # the tied word table
    model.load_state_dict({new: state[old] for old, new in names.items()}, strict=True)
    return model.eval()


def test_heads_and_released_losses_equal_transformers_pretraining() -> None:
    reference = hf_reference()
    model = copied(reference)
    g = torch.Generator().manual_seed(4)
    batch, words, regions = 3, 7, 5
    questions = torch.randint(5, SIZE["vocab"], (batch, words), generator=g)
    question_mask = torch.ones(batch, words, dtype=torch.bool)
    question_mask[1, 5:], question_mask[2, 4:] = False, False
    questions = questions.masked_fill(~question_mask, 0)
    features = torch.rand(batch, regions, SIZE["features"], generator=g)
    corner = torch.rand(batch, regions, 2, generator=g) * 0.5
    boxes = torch.cat([corner, corner + 0.1 + torch.rand(batch, regions, 2, generator=g) * 0.3], -1)
    inputs = {"questions": questions, "question_mask": question_mask, "features": features, "boxes": boxes,
              "region_mask": torch.ones(batch, regions, dtype=torch.bool)}
    words_target = torch.full((batch, words), IGNORE)
    words_target[0, 2], words_target[1, 1], words_target[2, 3] = 7, 9, 11
    masked = torch.rand(batch, regions, generator=g) < 0.4
    targets = Targets(
        words=words_target, matched=torch.tensor([1, 0, 1]), features=torch.rand(batch, regions, SIZE["features"],
                                                                                  generator=g),
        masked=masked, objects=torch.randint(0, OBJECTS, (batch, regions), generator=g),
        object_weights=torch.rand(batch, regions, generator=g),
        attributes=torch.randint(0, ATTRIBUTES, (batch, regions), generator=g),
        attribute_weights=torch.rand(batch, regions, generator=g), answers=torch.tensor([3, IGNORE, 0]))
    call = dict(input_ids=questions, attention_mask=question_mask.float(), visual_feats=features, visual_pos=boxes)
    obj_labels = {"obj": (targets.objects, targets.object_weights), "attr": (targets.attributes,
                                                                              targets.attribute_weights),
                  "feat": (targets.features, masked.float())}
    # the released reading, with transformers' visual_loss_normalizer (6.67; the released code's 1/0.15)
    settings = PretrainOptions(official=True, visual_weight=6.67).resolved()
    with torch.no_grad():
        out = model(inputs)
        losses = pretrain_losses(out, targets, settings)
        expected = reference(**call)
        torch.testing.assert_close(out.words, expected.prediction_logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.matching, expected.cross_relationship_score, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.answers, expected.question_answering_score, atol=1e-5, rtol=0)
        for ours, theirs in (
                (losses["words"], reference(**call, labels=targets.words).loss),
                (losses["matching"], reference(**call, matched_label=targets.matched).loss),
                (6.67 * (losses["feature"] + losses["object"] + losses["attribute"]),
                 reference(**call, obj_labels=obj_labels).loss),
                (losses["answers"], reference(**call, ans=targets.answers).loss),
                (total_loss(losses, settings, with_answers=True),
                 reference(**call, labels=targets.words, matched_label=targets.matched, obj_labels=obj_labels,
                           ans=targets.answers).loss)):
            torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-6)
