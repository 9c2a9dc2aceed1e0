"""BERT's uncased WordPiece (vlattn.data.wordpiece) against the ``tokenizers`` package's ``BertWordPieceTokenizer``
(Hugging Face's Rust implementation of BERT's tokenizer) on a small ``vocab.txt`` built here, plus the
vocabulary file's checks and the [CLS] ... [SEP] encoding LXMERT reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import BertWordPieceTokenizer

from vlattn.data.wordpiece import WordPieceVocabulary, basic_tokens
from vlattn.errors import DataError

ENTRIES = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "what", "color", "is", "cat", "dog",
           "##s", "on", "left", "##most", "?", ",", ".", "'", "-", "red", "un", "##believ", "##able", "##ly", "a",
           "cafe", "how", "many", "there", "are", "of", "image", "table", "!", "(", ")", "2", "##3", "1", "x",
           "\u4e00", "\u4e8c", "##x", "s"]

SENTENCES = [
    "What color is the cat?",
    "How many dogs are there on the LEFTMOST table!",
    "Unbelievably, a Café (cafe) -- isn't it?",
    "the dog's image: 23 x 1.",
    "\u4e00\u4e8c cats\tare\u00a0red\u0007",
    "zebra xylophone",
    "a" * 101 + " cat",
    "",
]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bert") / "vocab.txt"
    path.write_text("\n".join(ENTRIES) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("sentence", SENTENCES)
def test_pieces_equal_the_tokenizers_package(vocab_file: Path, sentence: str) -> None:
    reference = BertWordPieceTokenizer(str(vocab_file), lowercase=True)
    expected = reference.encode(sentence, add_special_tokens=False).tokens
    assert WordPieceVocabulary.from_file(vocab_file).tokenize(sentence) == expected


def test_encoding_adds_cls_and_sep_and_cuts(vocab_file: Path) -> None:
    vocab = WordPieceVocabulary.from_file(vocab_file)
    reference = BertWordPieceTokenizer(str(vocab_file), lowercase=True)
    text = "What color is the cat?"
    assert vocab.encode_text(text, 20) == reference.encode(text).ids
    ids = vocab.encode_text(text, 5)  # [CLS] what color is [SEP]
    assert [vocab.itos[i] for i in ids] == ["[CLS]", "what", "color", "is", "[SEP]"]


def test_basic_tokens_hand_computed() -> None:
    assert basic_tokens("Isn't  it\u00e9?") == ["isn", "'", "t", "ite", "?"]


def test_vocabulary_file_checks(tmp_path: Path) -> None:
    bad = tmp_path / "vocab.txt"
    bad.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab.txt.*\[PAD\] must be entry 0"):
        WordPieceVocabulary.from_file(bad)
    bad.write_text("[PAD]\n[UNK]\n[CLS]\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"needs \[SEP\]"):
        WordPieceVocabulary.from_file(bad)
    bad.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\ncat\ncat\n", encoding="utf-8")
    with pytest.raises(DataError, match="'cat' appears twice"):
        WordPieceVocabulary.from_file(bad)
    with pytest.raises(DataError, match="cannot read"):
        WordPieceVocabulary.from_file(tmp_path / "absent.txt")


def test_save_load_round_trip(vocab_file: Path, tmp_path: Path) -> None:
    vocab = WordPieceVocabulary.from_file(vocab_file)
    vocab.save(tmp_path / "vocab-words.json")
    assert WordPieceVocabulary.load(tmp_path / "vocab-words.json").itos == ENTRIES
