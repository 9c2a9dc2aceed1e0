"""What each model kind reads of the `model` section (`ModelKind.reads`, the keys a config may set for it): the
declaration equals the keys the task's model construction actually reads, recorded while every shipped preset of
the kind builds its model on the meta device; a key outside it is refused when a config loads."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch

from vlattn.config import ModelConfig
from vlattn.errors import ConfigError
from vlattn.models import MODELS
from vlattn.shipped_presets import names
from vlattn.tasks import task_of
from vlattn.validation import load_valid_config

FIELDS = frozenset(f.name for f in dataclasses.fields(ModelConfig))


class RecordingModelConfig(ModelConfig):
    """A ModelConfig noting every field read (``touched``: a set shared by the instances of one recording)."""

    touched: set[str]

    def __getattribute__(self, name: str):
        if name in FIELDS:
            type(self).touched.add(name)
        return object.__getattribute__(self, name)


def recorded_reads() -> dict[str, set[str]]:
    reads: dict[str, set[str]] = defaultdict(set)
    for name in names():
        cfg = load_valid_config(name)
        RecordingModelConfig.touched = set()
        recording = object.__new__(RecordingModelConfig)
        recording.__dict__.update(cfg.model.__dict__)
        cfg.model = recording
        with torch.device("meta"):
            task_of(cfg.task).create_model(cfg, vocab_size=40, num_answers=7 if cfg.task == "vqa" else None)
        reads[cfg.model.kind] |= RecordingModelConfig.touched
    return reads


def test_every_kind_declares_exactly_what_its_model_construction_reads() -> None:
    reads = recorded_reads()
    assert set(reads) == set(MODELS)  # every kind has a shipped preset
    for kind, touched in reads.items():
        assert touched == set(MODELS[kind].reads), kind


@pytest.mark.parametrize(("preset", "override", "unread"), [
    ("updown", "model.d_ff=4096", "model.d_ff"),
    ("updown", "model.encoder_layers=3", "model.encoder_layers"),  # named by an override: refused at the default too
    ("vqa-sla", "model.num_heads=4", "model.num_heads"),
    ("vqa-mcan", "model.max_positions=32", "model.max_positions"),
    ("demo", "model.word_vectors=/glove.txt", "model.word_vectors"),
])
def test_a_model_key_the_kind_never_reads_is_refused_in_one_line(preset: str, override: str, unread: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_valid_config(preset, [override])
    message = str(refused.value)
    assert "\n" not in message and message.endswith(f"never read by model kind {load_valid_config(preset).model.kind!r}: "
                                                    f"{unread} (remove them)")
