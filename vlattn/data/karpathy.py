"""COCO Karpathy split files (``dataset_coco.json``) and COCO caption annotation files.

Karpathy layout: ``{"images": [{"cocoid", "filename", "filepath", "split", "sentences": [{"tokens", "raw"}]}]}``
with ``split`` in train/restval/val/test (``restval`` is read as train; files without ``cocoid``,
e.g. Flickr, use ``imgid``). COCO caption layout (``captions_val2014.json``):
``{"info", "licenses", "type", "images": [{"id", "file_name"}], "annotations": [{"id", "image_id", "caption"}]}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.io import content_hash
from vlattn.text import tokenize
from vlattn.errors import DataError

SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {"restval": "train"}


def normalize_split(split: str) -> str:
    """``restval`` -> ``train``; other names unchanged."""
    return _SPLIT_ALIASES.get(split, split)


@dataclass
class ImageEntry:
    """One image of a split file: tokenised ``captions`` and the matching ``raw`` strings."""

    image_id: int
    split: str
    filename: str
    captions: list[list[str]]
    raw: list[str]
    filepath: str = ""


def captions_fingerprint(entries: Sequence[ImageEntry]) -> str:
    """:func:`~vlattn.io.content_hash` of every image's id, split and tokenised captions, split by split (train, val,
    test) in file order: what a captioning run records to recognise its data set when resumed."""
    return content_hash([(e.image_id, e.split, e.captions) for split in SPLITS for e in entries if e.split == split])


def check_caption(tokens: list[str], *, path: object = None, item: object = None, max_len: int | None = None) -> None:
    """Raise :class:`DataError` if a tokenised caption is empty, or longer than ``max_len`` when given."""
    if not tokens:
        raise DataError("empty caption (no word tokens)", path=path, item=item)
    if max_len is not None and len(tokens) > max_len:
        raise DataError(f"caption has {len(tokens)} tokens, more than the maximum {max_len}", path=path, item=item)


def _parse_image(record: Any, index: int, path: Path) -> ImageEntry:
    """One ``images[index]`` record -> :class:`ImageEntry` (errors name the image id)."""
    key = "cocoid" if isinstance(record, dict) and "cocoid" in record else "imgid"
    image_id = field(record, key, int, path=path, item=f"images[{index}]")
    item = f"image {image_id}"
    split = normalize_split(field(record, "split", str, path=path, item=item))
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; expected train/restval/val/test", path=path, item=item)
    sentences = field(record, "sentences", list, path=path, item=item)
    if not sentences:
        raise DataError("image has no sentences", path=path, item=item)
    captions, raw = [], []
    for j, sentence in enumerate(sentences):
        where = f"image {image_id} sentence {j}"
        if isinstance(sentence, dict) and "tokens" in sentence:
            tokens = [str(t) for t in field(sentence, "tokens", list, path=path, item=where)]
            text = sentence.get("raw", " ".join(tokens))
        else:
            text = field(sentence, "raw", str, path=path, item=where)
            tokens = tokenize(text)
        check_caption(tokens, path=path, item=where)
        captions.append(tokens)
        raw.append(str(text))
    return ImageEntry(
        image_id=image_id,
        split=split,
        filename=str(record.get("filename", "")),
        captions=captions,
        raw=raw,
        filepath=str(record.get("filepath", "")),
    )


def load_karpathy(path: str | Path) -> list[ImageEntry]:
    """All images of a Karpathy split file, in file order. Tokens are ``sentences[].tokens`` when
    present, else ``tokenize(raw)``."""
    path = Path(path)
    images = field(read_json(path), "images", list, path=path, item="top level")
    entries = [_parse_image(record, i, path) for i, record in enumerate(images)]
    seen: set[int] = set()
    for entry in entries:
        if entry.image_id in seen:
            raise DataError("duplicate image id", path=path, item=f"image {entry.image_id}")
        seen.add(entry.image_id)
    return entries


def require_split(entries: Mapping[str, Sequence[ImageEntry]], split: str, path: object) -> None:
    """Raise a :class:`DataError` naming the Karpathy file ``path`` when ``entries[split]`` is empty."""
    if not entries.get(split):
        present = [name for name in SPLITS if entries.get(name)]
        has = f"it has {', '.join(present)}" if present else "it has no images"
        raise DataError(f"no images in split {split!r} ({has})", path=path)


def write_karpathy(path: str | Path, entries: list[ImageEntry]) -> None:
    """Write ``entries`` as a Karpathy split file, atomically."""
    images = [
        {
            "cocoid": entry.image_id,
            "imgid": index,
            "filename": entry.filename,
            "filepath": entry.filepath,
            "split": entry.split,
            "sentences": [{"tokens": tokens, "raw": text} for tokens, text in zip(entry.captions, entry.raw)],
        }
        for index, entry in enumerate(entries)
    ]
    write_json(path, {"images": images, "dataset": "coco"})


def load_coco_captions(path: str | Path) -> dict[int, list[str]]:
    """Reference captions per image id from a COCO caption annotation file.

    Every image listed under ``images`` must have at least one non-empty caption.
    """
    path = Path(path)
    data = read_json(path)
    annotations = field(data, "annotations", list, path=path, item="top level")
    images = field(data, "images", list, path=path, item="top level") if "images" in data else []
    refs: dict[int, list[str]] = {field(im, "id", int, path=path, item=f"images[{i}]"): [] for i, im in enumerate(images)}
    for index, annotation in enumerate(annotations):
        where = f"annotations[{index}]"
        image_id = field(annotation, "image_id", int, path=path, item=where)
        caption = field(annotation, "caption", str, path=path, item=f"{where} (image {image_id})")
        if not caption.strip():
            raise DataError("empty caption", path=path, item=f"{where} (image {image_id})")
        refs.setdefault(image_id, []).append(caption)
    empty = [image_id for image_id, captions in refs.items() if not captions]
    if empty:
        raise DataError(f"{len(empty)} listed images have no captions", path=path, item=f"image {empty[0]}")
    return refs


def write_coco_captions(path: str | Path, refs: dict[int, list[str]], filenames: dict[int, str] | None = None) -> None:
    """Write reference captions in the ``captions_val2014.json`` layout, atomically.

    ``filenames`` maps image ids to ``file_name`` (default ``<id>.jpg``).
    """
    filenames = filenames or {}
    images = [{"id": image_id, "file_name": filenames.get(image_id, f"{image_id}.jpg")} for image_id in refs]
    annotations = [
        {"id": ann_id, "image_id": image_id, "caption": caption}
        for ann_id, (image_id, caption) in enumerate(((i, c) for i, caps in refs.items() for c in caps), start=1)
    ]
    info = {"description": "reference captions written by vlattn", "version": "1.0"}
    write_json(path, {"info": info, "licenses": [], "type": "captions", "images": images, "annotations": annotations})
