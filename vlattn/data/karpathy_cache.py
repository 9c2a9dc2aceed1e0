"""A cache of a parsed Karpathy split file, for the start-up of training at COCO scale.

Parsing and checking COCO's ``dataset_coco.json`` (123,287 images, 616k tokenised captions, 108 MB) takes about
12 s of a one-thread start-up (benchmarks/RESULTS.md "Scale: start-up"). :func:`load_karpathy_cached` keeps the
parsed entries in flat arrays in one ``.npz`` file (no pickled objects) and reads them back in a fraction of that.

Only a split file of :data:`MIN_BYTES` or more is cached: a small one parses in well under a second, and its data
directory (e.g. a synthetic set, which ``vlattn data synth --overwrite`` replaces only while it holds nothing but what
vlattn generated) stays as it was.

The cache records the SHA-256 of the split file's bytes: a file that changed in any way is parsed again and the
cache rewritten. It also keeps the captions' fingerprint (:func:`~vlattn.data.karpathy.captions_fingerprint`, the
hash a run records of its data set), computed once when the cache is written instead of at every start. The cache
file is written atomically, where no file is or over a cache vlattn wrote (recognised by its format tag when read,
of any version), never through a symbolic link; anything else at its path (a damaged cache too) is left as it is
and the split file parsed each time. A cache that cannot be written (a read-only data directory) only costs the
parse.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from vlattn.data.karpathy import SPLITS, ImageEntry, captions_fingerprint, load_karpathy
from vlattn.data.packed import flat_offsets
from vlattn.data.npz_cache import READ_ERRORS, has_format, npz_meta
from vlattn.errors import DataError, VlattnError
from vlattn.io import atomic_path

FORMAT, VERSION = "vlattn-karpathy-cache", 2
MIN_BYTES = 8 << 20  # about 10k COCO images; below it the parse takes about a second at most


@dataclass
class ParsedSplitFile:
    """The entries of a split file and their :func:`~vlattn.data.karpathy.captions_fingerprint` (``known``: the one
    read from a cache, else computed on the first call of :meth:`fingerprint`)."""

    entries: list[ImageEntry]
    known: str | None = None

    def fingerprint(self) -> str:
        if self.known is None:
            self.known = captions_fingerprint(self.entries)
        return self.known


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a few million lists and strings are built: its passes, triggered by
    the allocations, would walk all of them again and again; none of them form cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def file_sha256(path: Path) -> str:
    """SHA-256 of the bytes of ``path`` (read in 8 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _packed(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes (uint8) of ``texts`` concatenated, and their (n + 1,) byte offsets."""
    encoded = [text.encode("utf-8") for text in texts]
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), flat_offsets([len(b) for b in encoded])


def _unpacked(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    buffer, bounds = data.tobytes(), offsets.tolist()
    return [buffer[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]


def save_entries(path: Path, parsed: ParsedSplitFile, source_sha256: str) -> None:
    """Write ``parsed`` (from a split file of hash ``source_sha256``) to ``path`` atomically, replacing only a cache
    vlattn wrote (:func:`written_by_vlattn` must hold at the moment of replacement)."""
    entries = parsed.entries
    sentences = [caption for entry in entries for caption in entry.captions]
    words = sorted({token for caption in sentences for token in caption})
    index = {word: i for i, word in enumerate(words)}
    arrays = {
        "meta": np.array(json.dumps({"format": FORMAT, "version": VERSION, "source_sha256": source_sha256,
                                     "captions_fingerprint": parsed.fingerprint()})),
        "image_ids": np.array([entry.image_id for entry in entries], dtype=np.int64),
        "splits": np.array([SPLITS.index(entry.split) for entry in entries], dtype=np.uint8),
        "captions_per_image": np.array([len(entry.captions) for entry in entries], dtype=np.int64),
        "words": np.array(words, dtype=str),
        "tokens": np.fromiter((index[t] for caption in sentences for t in caption), dtype=np.int32,
                              count=sum(map(len, sentences))),
        "token_offsets": flat_offsets([len(caption) for caption in sentences]),
    }
    for name, texts in (("raw", [text for entry in entries for text in entry.raw]),
                        ("filenames", [entry.filename for entry in entries]),
                        ("filepaths", [entry.filepath for entry in entries])):
        arrays[name], arrays[f"{name}_offsets"] = _packed(texts)

    def replaceable(existing: Path) -> None:
        if not written_by_vlattn(existing):
            raise DataError("not a cache vlattn wrote; left as it is", path=existing)

    with atomic_path(path, replace=replaceable) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)


def written_by_vlattn(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a symbolic link) holding this cache's format tag, of any version."""
    return has_format(path, FORMAT)


def read_entries(path: Path) -> tuple[str, ParsedSplitFile] | None:
    """``(source SHA-256, parsed split file)`` of a cache written by :func:`save_entries`, or None when ``path`` is
    not one of this version (missing, a symbolic link, another file, damaged)."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data, _gc_paused():
            meta = npz_meta(data)
            if meta.get("format") != FORMAT or meta.get("version") != VERSION:
                return None
            fingerprint = str(meta["captions_fingerprint"])
            words = np.array(data["words"].tolist(), dtype=object)
            flat = words[data["tokens"]].tolist()  # every caption's words, one list
            bounds = data["token_offsets"].tolist()
            captions = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            raw = _unpacked(data["raw"], data["raw_offsets"])
            names = _unpacked(data["filenames"], data["filenames_offsets"])
            folders = _unpacked(data["filepaths"], data["filepaths_offsets"])
            per_image = flat_offsets(data["captions_per_image"]).tolist()
            ids, splits = data["image_ids"].tolist(), data["splits"].tolist()
            if len(captions) != len(raw) or per_image[-1] != len(captions) or not len(ids) == len(splits) == len(names):
                return None
            entries = [ImageEntry(image_id, SPLITS[split], name, captions[a:b], raw[a:b], folder)
                       for image_id, split, name, folder, a, b in
                       zip(ids, splits, names, folders, per_image[:-1], per_image[1:])]
    except READ_ERRORS:
        return None
    return str(meta["source_sha256"]), ParsedSplitFile(entries, fingerprint)


def load_karpathy_cached(path: str | Path, cache: str | Path) -> list[ImageEntry]:
    """:func:`~vlattn.data.karpathy.load_karpathy` of ``path``, read from the cache file ``cache`` when it was made
    from the same bytes; else parsed and the cache (re)written where vlattn may (see the module docstring)."""
    return read_split_file(path, cache).entries


def read_split_file(path: str | Path, cache: str | Path) -> ParsedSplitFile:
    """The entries of the split file ``path`` and their fingerprint, from the cache ``cache`` when it was made from
    the same bytes; else parsed and the cache (re)written where vlattn may (see the module docstring)."""
    path, cache = Path(path), Path(cache)
    try:
        if path.stat().st_size < MIN_BYTES:
            return _parsed(path)
        digest = file_sha256(path)
    except OSError:
        return _parsed(path)  # its own one-line error for a missing or unreadable file
    found = read_entries(cache)
    if found is not None and found[0] == digest:
        return found[1]
    parsed = _parsed(path)
    if found is not None or not os.path.lexists(cache) or written_by_vlattn(cache):
        try:
            if file_sha256(path) == digest:  # the bytes parsed are the bytes hashed (not changed meanwhile)
                save_entries(cache, parsed, digest)
        except (OSError, VlattnError):
            pass  # a cache that cannot be written (read-only directory, a file that appeared) costs a parse
    return parsed


def _parsed(path: Path) -> ParsedSplitFile:
    return ParsedSplitFile(load_karpathy(path))


def cache_file(root: str | Path, karpathy: str) -> Path:
    """Where the cache of the split file ``karpathy`` (relative to the data root ``root``) goes: ``cache/`` under the
    root, named after that relative path."""
    return Path(root) / "cache" / f"karpathy-{hashlib.sha256(karpathy.encode()).hexdigest()[:16]}.npz"
