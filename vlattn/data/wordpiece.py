"""BERT's uncased WordPiece tokenizer (Devlin et al. 2019; Wu et al. 2016) over a local ``vocab.txt``, as BERT's
released ``tokenization.py`` (``BasicTokenizer(do_lower_case=True)`` + ``WordpieceTokenizer``) splits text:

1. clean: drop NUL, U+FFFD and control characters, every whitespace character becomes a space;
2. put spaces around CJK ideographs;
3. per whitespace-separated token: lower case, strip accents (NFD, combining marks dropped), split off every
   punctuation character (ASCII symbols and Unicode category P*) as a token of its own;
4. WordPiece: each token longer than 100 characters is ``[UNK]``; otherwise the longest vocabulary prefix, then
   the longest ``##``-prefixed continuation, and so on; a token some part of which matches nothing is ``[UNK]``.

A question is encoded as ``[CLS] pieces [SEP]``, cut to ``max_len`` entries in all (LXMERT's
``convert_sents_to_features``: the pieces cut to ``max_len - 2``). The vocabulary must hold ``[PAD]`` at index 0
(the models' padding id) and ``[UNK]``, ``[CLS]``, ``[SEP]``. ``tests/data/test_wordpiece.py`` checks the splits
against the ``tokenizers`` package's ``BertWordPieceTokenizer``. Nothing is downloaded: the ``vocab.txt`` of a
BERT release is a local file (``data.wordpiece_vocab``).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Sequence

from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.errors import DataError

FORMAT = "vlattn-wordpiece"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
MAX_CHARS = 100


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
            or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)


def basic_tokens(text: str) -> list[str]:
    """Steps 1-3 of the module docstring: lower-cased, accent-free words and punctuation marks."""
    cleaned = []
    for char in text:
        code = ord(char)
        if code == 0 or code == 0xFFFD or _is_control(char):
            continue
        if _is_whitespace(char):
            cleaned.append(" ")
        elif _is_cjk(code):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    tokens: list[str] = []
    for word in "".join(cleaned).split():
        word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
        current = ""
        for char in word:
            if _is_punctuation(char):
                tokens += [current, char] if current else [char]
                current = ""
            else:
                current += char
        if current:
            tokens.append(current)
    return tokens


class WordPieceVocabulary:
    """A WordPiece vocabulary (``vocab.txt`` entries in index order) and BERT's uncased tokenizer over it."""

    PAD = 0

    def __init__(self, entries: Sequence[str], *, path: object = None) -> None:
        self.itos: list[str] = list(entries)
        self.stoi: dict[str, int] = {}
        for index, entry in enumerate(self.itos):
            if entry in self.stoi:
                raise DataError(f"entry {entry!r} appears twice (lines {self.stoi[entry] + 1} and {index + 1})", path=path)
            self.stoi[entry] = index
        missing = [s for s in SPECIALS if s not in self.stoi]
        if missing:
            raise DataError(f"a BERT vocabulary needs {', '.join(missing)}", path=path)
        if self.stoi["[PAD]"] != self.PAD:
            raise DataError(f"[PAD] must be entry 0 (line 1), found at line {self.stoi['[PAD]'] + 1}", path=path)
        self.unk, self.cls, self.sep = self.stoi["[UNK]"], self.stoi["[CLS]"], self.stoi["[SEP]"]

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def from_file(cls, path: str | Path) -> WordPieceVocabulary:
        """Read a ``vocab.txt``: one entry per line, index order."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"cannot read the WordPiece vocabulary: {err}", path=path) from None
        return cls([line.rstrip("\r") for line in text.split("\n")[: -1 if text.endswith("\n") else None]], path=path)

    def pieces(self, word: str) -> list[str]:
        """The WordPiece split of one basic token (``[UNK]`` when some part matches nothing)."""
        if len(word) > MAX_CHARS:
            return ["[UNK]"]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.stoi:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            out.append(piece)
            start = end
        return out

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece pieces of ``text``."""
        return [piece for word in basic_tokens(text) for piece in self.pieces(word)]

    def encode_text(self, text: str, max_len: int) -> list[int]:
        """``[CLS] pieces [SEP]`` ids, the pieces cut to ``max_len - 2``."""
        pieces = self.tokenize(text)[: max(max_len - 2, 0)]
        return [self.cls, *(self.stoi[p] for p in pieces), self.sep]

    def save(self, path: str | Path) -> None:
        """Write ``{"format", "itos"}`` JSON atomically."""
        write_json(path, {"format": FORMAT, "itos": self.itos})

    @classmethod
    def load(cls, path: str | Path) -> WordPieceVocabulary:
        """Read a vocabulary written by :meth:`save`."""
        data = read_json(path)
        itos = field(data, "itos", list, path=path, item="itos")
        if data.get("format") != FORMAT or not all(isinstance(entry, str) for entry in itos):
            raise DataError(f"not a {FORMAT} file", path=path)
        return cls(itos, path=path)
