"""The CIDEr-D reward for self-critical sequence training.

Document frequencies come from the *training* references, built once and cached on disk, in one of the two
conventions of the anchors:

- ``mode="image"``: one document per image over its reference set, N = number of images
  (self-critical.pytorch's ``prepro_ngrams.py``);
- ``mode="caption"``: one document per reference caption, N = number of captions (the M2 code).

The table is always built with the end token appended to every reference: n-grams without the end token
get the same counts as without it, so one table serves both settings of ``CiderReward(include_eos=...)``.
:class:`CiderReward` scores a batch of sampled captions against each image's references with the same
vectorised n-gram code as :class:`vlattn.metrics.CiderD` (n = 1..4, sigma = 6, clipping, x10).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vlattn.io import atomic_path
from vlattn.metrics.cider import cider_d_scores, inverse_document_frequency
from vlattn.metrics.ngrams import Caption, Layout, count_ngrams, document_frequency, encode

MODES = ("image", "caption")
_FORMAT = 1


def _token_lists(captions: Sequence[Caption]) -> list[list[str]]:
    return [c.split() if isinstance(c, str) else list(c) for c in captions]


def reference_fingerprint(
    references: Sequence[Sequence[Caption]], *, mode: str, n: int, eos_token: str, tokenization: str = ""
) -> str:
    """SHA-256 over the settings, the caller's tokenisation/vocabulary description and every reference token."""
    digest = hashlib.sha256(json.dumps([_FORMAT, mode, n, eos_token, tokenization]).encode())
    for refs in references:
        for tokens in _token_lists(refs):
            digest.update(("\x1f".join(tokens) + "\x1e").encode())
        digest.update(b"\x1d")
    return digest.hexdigest()


@dataclass(frozen=True)
class CiderDocumentFrequency:
    """Document frequencies of the 1..n-grams of a reference corpus.

    ``words`` is the word table (id = index, ``eos_token`` included); ``keys[k-1]`` (G_k,) are the sorted
    k-gram keys (``prefix id * len(words) + word id``, prefix id = index in ``keys[k-2]``) and
    ``counts[k-1]`` (G_k,) their document frequencies.
    """

    mode: str
    n: int
    eos_token: str
    num_documents: int
    words: tuple[str, ...]
    keys: tuple[np.ndarray, ...]
    counts: tuple[np.ndarray, ...]
    fingerprint: str

    @classmethod
    def build(
        cls, references: Sequence[Sequence[Caption]], *, mode: str = "image", n: int = 4,
        eos_token: str = "<eos>", tokenization: str = "",
    ) -> "CiderDocumentFrequency":
        """From tokenised references, one list per training image (captions as strings or token lists)."""
        if mode not in MODES:
            raise ValueError(f"unknown document-frequency mode {mode!r}; valid: {', '.join(MODES)}")
        captions = [tokens + [eos_token] for refs in references for tokens in _token_lists(refs)]
        vocab: dict[str, int] = {}
        sentences = encode(captions, vocab)
        per_image = np.fromiter(map(len, references), dtype=np.int64, count=len(references))
        document = np.arange(len(captions)) if mode == "caption" else np.repeat(np.arange(len(references)), per_image)
        counts = count_ngrams(sentences, n)
        return cls(
            mode=mode, n=n, eos_token=eos_token,
            num_documents=len(captions) if mode == "caption" else len(references),
            words=tuple(vocab), keys=tuple(order.keys for order in counts),
            counts=tuple(document_frequency(order, document) for order in counts),
            fingerprint=reference_fingerprint(references, mode=mode, n=n, eos_token=eos_token, tokenization=tokenization),
        )

    @classmethod
    def cached(
        cls, path: str | Path, references: Sequence[Sequence[Caption]], *, mode: str = "image", n: int = 4,
        eos_token: str = "<eos>", tokenization: str = "",
    ) -> "CiderDocumentFrequency":
        """Load ``path`` (.npz) when its fingerprint matches these references and settings; else build and save.

        ``tokenization`` describes the tokenizer/vocabulary the references went through (e.g. a vocabulary
        hash); it is part of the fingerprint, so a change triggers a rebuild even if the tokens happen to agree.
        """
        fingerprint = reference_fingerprint(references, mode=mode, n=n, eos_token=eos_token, tokenization=tokenization)
        path = Path(path)
        ours = not os.path.lexists(path)
        if not ours and path.is_file() and not path.is_symlink():
            try:
                table = cls.load(path)
                ours = True  # a table vlattn wrote: used, or replaced when stale
            except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):  # damaged or foreign
                table = None
            if table is not None and table.fingerprint == fingerprint:
                return table
        table = cls.build(references, mode=mode, n=n, eos_token=eos_token, tokenization=tokenization)
        if ours:  # a file vlattn cannot read as its table is someone else's: left in place, the table not cached
            table.save(path)
        return table

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` file atomically (temporary file, then rename)."""
        meta = {"format": _FORMAT, "mode": self.mode, "n": self.n, "eos_token": self.eos_token,
                "num_documents": self.num_documents, "fingerprint": self.fingerprint}
        arrays: dict[str, Any] = {"meta": np.array(json.dumps(meta)), "words": np.array(self.words, dtype=str)}
        for k in range(self.n):
            arrays[f"keys_{k + 1}"], arrays[f"counts_{k + 1}"] = self.keys[k], self.counts[k]
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "CiderDocumentFrequency":
        """Read a table written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta["format"] != _FORMAT:
                raise ValueError(f"{path}: document-frequency format {meta['format']} (expected {_FORMAT})")
            n = meta["n"]
            return cls(
                mode=meta["mode"], n=n, eos_token=meta["eos_token"], num_documents=meta["num_documents"],
                words=tuple(data["words"].tolist()), keys=tuple(data[f"keys_{k + 1}"] for k in range(n)),
                counts=tuple(data[f"counts_{k + 1}"] for k in range(n)), fingerprint=meta["fingerprint"],
            )

    def lookup(self, local_keys: Sequence[np.ndarray], base: int) -> list[np.ndarray]:
        """Document frequencies (0 when unseen) of n-grams given by keys over word ids with ``base``.

        Word ids below ``len(words)`` must be this table's ids (larger ones are words it has never seen).
        """
        out: list[np.ndarray] = []
        table_ids = np.empty(0, dtype=np.int64)
        for k, keys in enumerate(local_keys):
            word = keys % base if k else keys
            valid = word < len(self.words)
            if k:
                prefix = table_ids[keys // base]
                valid &= prefix >= 0
                query = prefix * len(self.words) + word
            else:
                query = word
            pos = np.minimum(_search(self.keys[k], query), max(len(self.keys[k]) - 1, 0))
            found = valid & (self.keys[k][pos] == query) if len(self.keys[k]) else np.zeros(len(keys), bool)
            table_ids = np.where(found, pos, -1)
            out.append(np.where(found, self.counts[k][pos] if len(self.keys[k]) else 0, 0))
        return out


def _search(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``np.searchsorted(table, query)``, about twice as fast on a large table: the queries go in sorted order."""
    order = np.argsort(query)
    pos = np.empty(len(query), dtype=np.int64)
    pos[order] = np.searchsorted(table, query[order])
    return pos


class CiderReward:
    """CIDEr-D rewards of sampled captions against their images' references, with training document frequencies.

    ``include_eos``: whether the end token counts as a word (self-critical.pytorch: True; M2: False). Captions
    are strings, token lists, or token-id sequences (rows of a tensor/array; then ``vocabulary`` maps ids to
    words). A token-id caption ends at its first end token, which counts only if present; string and token-list
    captions are complete, so with ``include_eos`` the end token is appended to them.
    """

    def __init__(
        self, df: CiderDocumentFrequency, include_eos: bool, *, vocabulary: Sequence[str] | None = None,
        sigma: float = 6.0,
    ) -> None:
        self.df = df
        self.include_eos = include_eos
        self.sigma = sigma
        self._vocab = {word: i for i, word in enumerate(df.words)}
        self._id_to_word = list(vocabulary) if vocabulary is not None else []
        self._eos_id = self._id_to_word.index(df.eos_token) if df.eos_token in self._id_to_word else None

    def __call__(self, samples: Sequence[Any], references: Sequence[Sequence[Caption]]) -> np.ndarray:
        """(len(samples),) rewards; sample i belongs to image ``i // k`` with ``k = len(samples) // len(references)``."""
        samples = samples.tolist() if hasattr(samples, "tolist") else samples
        if len(references) == 0 or len(samples) % len(references):
            raise ValueError(f"{len(samples)} samples are not a multiple of {len(references)} reference sets")
        per_image = len(samples) // len(references)
        candidates = [self._words(s) for s in samples]
        image_refs = [[self._words(r) for r in refs] for refs in references]
        layout = Layout.build(candidates, [image_refs[i // per_image] for i in range(len(samples))])
        sentences = encode(layout.captions, dict(self._vocab))
        counts = count_ngrams(sentences, self.df.n)
        df = self.df.lookup([order.keys for order in counts], sentences.base)
        idf = [inverse_document_frequency(d, self.df.num_documents) for d in df]
        runs = [layout.runs(order) for order in counts]
        return cider_d_scores(layout, sentences.lengths, counts, runs, idf, self.sigma)

    def _words(self, caption: Any) -> list[str]:
        caption = caption.tolist() if hasattr(caption, "tolist") else caption
        if isinstance(caption, str):
            words, ended = caption.split(), True
        elif caption and not isinstance(caption[0], str):
            words, ended = self._decode(caption)
        else:
            words, ended = list(caption), True
        return words + [self.df.eos_token] if self.include_eos and ended else words

    def _decode(self, ids: Sequence[int]) -> tuple[list[str], bool]:
        if not self._id_to_word:
            raise ValueError("token-id captions need CiderReward(..., vocabulary=[word of each id])")
        ended = self._eos_id is not None and self._eos_id in ids
        ids = ids[: ids.index(self._eos_id)] if ended else ids
        return [self._id_to_word[i] for i in ids], ended
