"""Vocabulary rules: threshold, split selection, specials, UNK, truncation, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlattn.data.karpathy import ImageEntry, load_karpathy
from vlattn.data.vocab import Vocabulary, build_vocabulary
from vlattn.errors import DataError


def entry(image_id: int, split: str, captions: list[str]) -> ImageEntry:
    return ImageEntry(image_id, split, f"{image_id}.jpg", [c.split() for c in captions], captions)


ENTRIES = [
    entry(1, "train", ["a dog runs", "a dog sits", "a cat"]),
    entry(2, "train", ["a cat sleeps", "the dog"]),
    entry(3, "val", ["a zebra", "a zebra", "a zebra", "zebra zebra"]),
]


def test_specials_threshold_and_ordering() -> None:
    vocab = build_vocabulary(ENTRIES, min_count=2)
    # train counts: a 4, dog 3, cat 2; runs/sits/sleeps/the 1
    assert vocab.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "dog", "cat"]
    assert (vocab.PAD, vocab.BOS, vocab.EOS, vocab.UNK) == (0, 1, 2, 3) and len(vocab) == 7
    assert "zebra" not in vocab
    assert build_vocabulary(ENTRIES, min_count=4).itos[4:] == ["a"]
    assert build_vocabulary(ENTRIES, min_count=5).itos[4:] == []


def test_default_threshold_is_five() -> None:
    many = [entry(i, "train", ["red cube"] * 2 + ["blue"]) for i in range(3)]  # red, cube x6; blue x3
    assert build_vocabulary(many).itos[4:] == ["cube", "red"]  # equal counts: alphabetical


def test_split_selection() -> None:
    vocab = build_vocabulary(ENTRIES, splits=("train", "val"), min_count=2)
    assert vocab.itos[4:] == ["a", "zebra", "dog", "cat"]  # a 7, zebra 5, dog 3, cat 2
    assert build_vocabulary(ENTRIES, splits=("val",), min_count=2).itos[4:] == ["zebra", "a"]  # zebra 5, a 3


def test_restval_counts_as_train(tmp_path: Path) -> None:
    images = [{"cocoid": 1, "split": "restval", "sentences": [{"tokens": ["kite"]}, {"tokens": ["kite"]}]},
              {"cocoid": 2, "split": "test", "sentences": [{"tokens": ["boat"]}, {"tokens": ["boat"]}]}]  # fmt: skip
    (tmp_path / "d.json").write_text(json.dumps({"images": images}))
    entries = load_karpathy(tmp_path / "d.json")
    assert build_vocabulary(entries, min_count=2).itos[4:] == ["kite"]
    assert build_vocabulary(entries, splits=("restval",), min_count=2).itos[4:] == ["kite"]


def test_encode_unk_truncation_and_decode() -> None:
    vocab = Vocabulary(["a", "dog", "cat"])
    assert vocab.encode(["a", "purple", "dog"]) == [4, 3, 5]
    assert vocab.encode(["a", "dog", "cat", "a"], max_len=2) == [4, 5]
    assert vocab.decode([1, 4, 5, 3, 2, 6, 0]) == "a dog <unk>"
    assert vocab.decode([4, 0, 6]) == "a cat"


def test_save_load_round_trip(tmp_path: Path) -> None:
    vocab = build_vocabulary(ENTRIES, min_count=1)
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocabulary.load(tmp_path / "vocab.json")
    assert loaded.itos == vocab.itos and loaded.stoi == vocab.stoi
    assert list(tmp_path.iterdir()) == [tmp_path / "vocab.json"]


def test_load_rejects_other_files(tmp_path: Path) -> None:
    (tmp_path / "v.json").write_text(json.dumps({"format": "vlattn-vocab", "itos": ["a", "<pad>"]}))
    with pytest.raises(DataError, match="special tokens must come first") as err:
        Vocabulary.load(tmp_path / "v.json")
    assert "v.json" in str(err.value)
    with pytest.raises(DataError, match="unique"):
        Vocabulary(["a", "a"])


def test_build_and_encode_flat_match_a_word_by_word_reference() -> None:
    """The vocabulary and the flat encoding of many captions equal a plain word-by-word count and lookup (ordering by
    count then word, unknown words -> UNK, empty captions kept as empty runs)."""
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)] + ["<unk>"]  # a special token in the text is not a word of the table
    captions = [[rng.choice(words) for _ in range(rng.randint(0, 9))] for _ in range(300)]
    captions += [["rare"] * 4, ["edge"] * 5, ["once", "edge"][:1]]  # 4 and 1 below the threshold, 5 at it
    counts: dict[str, int] = {}
    for caption in captions:
        for word in caption:
            counts[word] = counts.get(word, 0) + 1
    kept = sorted((w for w, c in counts.items() if c >= 5 and w != "<unk>"), key=lambda w: (-counts[w], w))
    vocab = Vocabulary.build(iter(captions), min_count=5)  # a one-pass iterator, as build_vocabulary hands it
    assert vocab.itos == ["<pad>", "<bos>", "<eos>", "<unk>", *kept]
    assert "edge" in kept and "rare" not in kept and "once" not in kept
    ids, offsets = vocab.encode_flat(captions)
    assert ids.dtype.name == "int32" and offsets.dtype.name == "int64"
    expected = [[kept.index(w) + 4 if w in kept else Vocabulary.UNK for w in caption] for caption in captions]
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == expected
