"""Checkpoint layout: named vocabularies as separate files, their hashes bound to the weights, old
``vocab.json`` checkpoints still readable, and one-line errors when a vocabulary does not match the weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_model

from vlattn.config import Config, config_to_dict
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.errors import DataError
from vlattn.training.checkpoint import load_checkpoint, save_checkpoint

WORDS = Vocabulary(["a", "dog", "cat"])
ANSWERS = AnswerVocabulary(["yes", "no", "2"])


def safetensors_metadata(file: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors header, read from the raw bytes (8-byte length, then JSON)."""
    raw = file.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]).get("__metadata__", {})


def write(path: Path, **vocabularies) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(path, torch.nn.Linear(3, 2), Config(), vocabularies or {"words": WORDS})


def test_named_vocabularies_are_files_with_their_hashes_in_the_weights(tmp_path: Path) -> None:
    ckpt = write(tmp_path / "ckpt", words=WORDS, answers=ANSWERS)
    assert sorted(p.name for p in ckpt.iterdir()) == [
        ".vlattn.json", "config.json", "model.safetensors", "vocab-answers.json", "vocab-words.json"]
    loaded = load_checkpoint(ckpt)
    assert loaded.vocabulary("words", Vocabulary.load).itos == WORDS.itos
    assert loaded.vocabulary("answers", AnswerVocabulary.load).itos == ANSWERS.itos
    recorded = json.loads(safetensors_metadata(ckpt / "model.safetensors")["vlattn.vocabularies"])
    assert recorded == loaded.hashes and set(recorded) == {"words", "answers"}
    # a hash identifies the entries: the same words give the same hash, one changed word another
    other = write(tmp_path / "other", words=Vocabulary(["a", "dog", "cow"]), answers=AnswerVocabulary(ANSWERS.itos))
    assert load_checkpoint(other).hashes["answers"] == recorded["answers"]
    assert load_checkpoint(other).hashes["words"] != recorded["words"]


def test_a_vocabulary_that_does_not_match_the_weights_is_an_error(tmp_path: Path) -> None:
    ckpt = write(tmp_path / "ckpt")
    # same size (the weights still load), two words swapped: would silently give wrong captions
    Vocabulary(["dog", "a", "cat"]).save(ckpt / "vocab-words.json")
    with pytest.raises(DataError, match=r"vocab-words\.json: vocabulary does not match the weights"):
        load_checkpoint(ckpt).vocabulary("words", Vocabulary.load)


def test_missing_vocabularies_are_named(tmp_path: Path) -> None:
    ckpt = write(tmp_path / "ckpt")
    with pytest.raises(DataError, match="the weights record no 'answers' vocabulary"):
        load_checkpoint(ckpt).vocabulary("answers", AnswerVocabulary.load)
    (ckpt / "vocab-words.json").unlink()
    with pytest.raises(DataError, match="checkpoint has no 'words' vocabulary"):
        load_checkpoint(ckpt).vocabulary("words", Vocabulary.load)


def test_a_vocab_json_is_not_read_as_the_words_vocabulary(tmp_path: Path) -> None:
    """``vocab.json`` was the vocabulary's name only during development: a checkpoint holding it and no
    ``vocab-words.json`` has no words vocabulary."""
    torch.manual_seed(0)
    path = tmp_path / "old"
    path.mkdir()
    save_model(torch.nn.Linear(3, 2), str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config_to_dict(Config())))
    WORDS.save(path / "vocab.json")
    with pytest.raises(DataError, match="checkpoint has no 'words' vocabulary"):
        load_checkpoint(path).vocabulary("words", Vocabulary.load)


def test_malformed_metadata_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    path.mkdir()
    save_model(torch.nn.Linear(3, 2), str(path / "model.safetensors"), metadata={"vlattn.vocabularies": "[1, 2"})
    (path / "config.json").write_text(json.dumps(config_to_dict(Config())))
    with pytest.raises(DataError, match=r"model\.safetensors: malformed vlattn\.vocabularies metadata"):
        load_checkpoint(path)
