"""Cross-modality matching is learnable through the pretraining data path: images of one coloured shape whose
features encode the colour and the shape directly, captions "<colour> <shape>" naming exactly that, pairs in a
:class:`PretrainDataset` over an in-memory store, shuffled and collated as training does, mismatched by the
objective's own draws. A model of the lxmert kind learns to tell matched from mismatched pairs on held-out images
far above chance (50%), which a wrong matching label, a sentence not replaced, or an image not reaching the pooled
vector would prevent.

The model starts from N(0, 0.1) weights (``model.options.init_std``): from BERT's 0.02 at d=32 the same training
stays on the plateau of chance for far longer than a unit test runs (docs/lxmert.md, "Matching and the image at the
demo size")."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from vlattn.config import load_config
from vlattn.data.features.memory import MemoryStore
from vlattn.data.pretraining import Pair, PretrainDataset, collate_pretrain
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.tasks.pretraining import build_model, masking_vocabulary
from vlattn.training.pretraining import PretrainObjective, PretrainOptions, corrupt, validation_metrics

COLOURS = ("red", "green", "blue", "white")
SHAPES = ("circle", "square", "star", "disk")
REGIONS, FEATURES = 3, len(COLOURS) + len(SHAPES)
MODEL = ["model.kind=lxmert", f"model.feature_dim={FEATURES}", "model.d_model=32", "model.num_heads=2",
         "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1", "model.options.object_layers=1",
         "model.max_positions=8", "model.dropout=0.0", "model.options.init_std=0.1"]
STEPS, BATCH, LR, WARMUP = 300, 32, 1e-3, 15


def scenes(images: int, first_id: int, rng: np.random.Generator) -> tuple[list[Pair], np.ndarray, np.ndarray]:
    """``images`` images of one object each: pairs "<colour> <shape>", features (images, REGIONS, FEATURES) with
    the object's colour and shape one-hot in a random region (the others zero: background), boxes in [0, 1]."""
    colours, shapes = rng.integers(len(COLOURS), size=images), rng.integers(len(SHAPES), size=images)
    features = np.zeros((images, REGIONS, FEATURES), np.float32)
    where = rng.integers(REGIONS, size=images)
    features[np.arange(images), where, colours] = 1.0
    features[np.arange(images), where, len(COLOURS) + shapes] = 1.0
    corners = np.sort(rng.random((images, REGIONS, 2, 2)), axis=2)  # x1 <= x2, y1 <= y2
    boxes = corners.transpose(0, 1, 3, 2).reshape(images, REGIONS, 4)[..., [0, 2, 1, 3]].astype(np.float32)
    pairs = [Pair(first_id + i, f"{COLOURS[c]} {SHAPES[s]}") for i, (c, s) in enumerate(zip(colours, shapes))]
    return pairs, features, boxes


def dataset(pairs: list[Pair], features: np.ndarray, boxes: np.ndarray, words: WordPieceVocabulary) -> PretrainDataset:
    store = MemoryStore(features, boxes, ids=[p.image_id for p in pairs])
    return PretrainDataset(pairs, store, words, 1, max_regions=REGIONS, max_length=8, object_classes=1,
                           attribute_classes=1)


def test_matching_is_learnt_when_the_caption_names_the_image() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    words = WordPieceVocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *COLOURS, *SHAPES])
    train = dataset(*scenes(256, 0, rng), words)
    val = dataset(*scenes(128, 1000, rng), words)
    options = PretrainOptions(tasks=["matching"], object_classes=1, attribute_classes=1)
    settings, vocab = options.resolved(), masking_vocabulary(words)
    model = build_model(load_config("lxmert-pretrain-demo", MODEL), len(words), 1)
    objective = PretrainObjective(settings, train, vocab, 1)  # mismatched sentences drawn from the training pairs
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / WARMUP, (STEPS - step) / (STEPS - WARMUP)))
    loader = DataLoader(train, batch_size=BATCH, shuffle=True, collate_fn=collate_pretrain, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    step = 0
    model.train()
    while step < STEPS:
        for batch in loader:
            loss, _ = objective(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            if step == STEPS:
                break
    draws = torch.Generator().manual_seed(1)
    held_out = [corrupt(batch, settings, train, vocab, draws)
                for batch in DataLoader(val, batch_size=64, collate_fn=collate_pretrain)]
    assert 0.3 < float(torch.cat([t.matched for _, t in held_out]).float().mean()) < 0.7  # both classes present
    assert validation_metrics(model, held_out, settings)["matching_accuracy"] > 80.0
