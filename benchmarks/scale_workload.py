"""A COCO-sized synthetic workload for benchmarks/bench_scale.py: captions, VQA questions and region stores.

Shapes are COCO's (Karpathy split: 113,287 / 5,000 / 5,000 images at 123,287, scaled down proportionally for
smaller counts; 5 captions per image; VQA v2: about 5.4 questions per image with 10 answers each); the values
are random. Image ids are not contiguous (``9 + 7 * i``), as COCO's are not.

Caption lengths follow an approximation of the Karpathy training captions' word counts (mean about 10.5, 8 to
20+ words), words a Zipf law over 25,000 word types (about 10k of them pass ``vocab_min_count=5`` at 123k
images, near COCO's 10,201).

Stores (every one holds the same regions): ``memmap`` (float16, vlattn's writer), ``m2-hdf5`` (float32, vlattn's
writer, M2's ``<id>_features`` layout), ``npz-dir`` (float32, one ``.npz`` per image), ``tsv`` (bottom-up
TSV, base64 float32) and ``lmdb`` (ViLBERT-style pickled float32 records). :func:`sparse_memmap` writes a
memmap store whose feature file is a hole (no data blocks): real index arrays and boxes, zero features, for
measurements that need a COCO-size store but not its bytes (start-up, memory; never cold-cache throughput).
"""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Iterator

import numpy as np

from vlattn.data.features import write_m2_hdf5, write_memmap, write_npz_dir
from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.memmap import META
from vlattn.data.karpathy import ImageEntry, write_karpathy
from vlattn.data.vqa import Annotation, Question, write_annotations, write_questions

COCO_IMAGES, COCO_EVAL = 123_287, 5_000
# approximate share of Karpathy training captions by word count (8 words and fewer lumped at 8, 20+ at 20)
LENGTHS = {8: 0.12, 9: 0.22, 10: 0.21, 11: 0.15, 12: 0.1, 13: 0.07, 14: 0.045, 15: 0.03, 16: 0.02, 17: 0.013,
           18: 0.009, 19: 0.006, 20: 0.007}
WORD_TYPES, QUESTIONS_PER_IMAGE = 25_000, 5.4
WIDTH, HEIGHT = 640, 480
FORMATS = ("memmap", "m2-hdf5", "npz-dir", "tsv", "lmdb")


def image_ids(images: int) -> np.ndarray:
    """COCO-like, non-contiguous ids of ``images`` images (int64)."""
    return 9 + 7 * np.arange(images, dtype=np.int64)


def split_sizes(images: int) -> tuple[int, int, int]:
    """(train, val, test): Karpathy's 5,000 + 5,000 at 123,287 images, in proportion below."""
    held = max(1, round(images * COCO_EVAL / COCO_IMAGES)) if images >= 3 else 0
    return images - 2 * held, held, held


def _words(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` word indices drawn from a Zipf law over :data:`WORD_TYPES` words."""
    ranks = np.arange(1, WORD_TYPES + 1, dtype=np.float64)
    weights = ranks ** -1.05
    return rng.choice(WORD_TYPES, size=count, p=weights / weights.sum())


def captions(images: int, per_image: int = 5, seed: int = 0) -> list[list[list[str]]]:
    """Tokenised captions: ``per_image`` lists of words for each image."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice(list(LENGTHS), size=images * per_image, p=np.asarray(list(LENGTHS.values())) / sum(LENGTHS.values()))
    words = _words(rng, int(lengths.sum()))
    vocabulary = [f"w{index}" for index in range(WORD_TYPES)]
    flat = [vocabulary[index] for index in words.tolist()]
    ends = np.cumsum(lengths).tolist()
    sentences = [flat[start:end] for start, end in zip([0, *ends[:-1]], ends)]
    return [sentences[k : k + per_image] for k in range(0, len(sentences), per_image)]


def write_captions(path: Path, images: int, seed: int = 0) -> None:
    """A Karpathy split file of ``images`` images (see :func:`split_sizes`)."""
    train, val, _ = split_sizes(images)
    ids = image_ids(images).tolist()
    entries = []
    for index, (image_id, tokens) in enumerate(zip(ids, captions(images, seed=seed))):
        split = "train" if index < train else "val" if index < train + val else "test"
        entries.append(ImageEntry(image_id, split, f"{image_id}.jpg", tokens, [" ".join(t) for t in tokens]))
    write_karpathy(path, entries)


def write_vqa(folder: Path, images: int, seed: int = 0) -> tuple[Path, Path]:
    """VQA v2-sized training question and annotation files over the first ``split_sizes(images)[0]`` images:
    about 5.4 questions per image, ten answers each from 3,000 candidate answers. Returns both paths."""
    rng = np.random.default_rng(seed)
    ids = image_ids(split_sizes(images)[0])
    per_image = rng.poisson(QUESTIONS_PER_IMAGE - 1, size=len(ids)) + 1
    owners = np.repeat(ids, per_image).tolist()
    lengths = rng.integers(4, 12, size=len(owners))
    words = _words(rng, int(lengths.sum()))
    answers = rng.zipf(1.3, size=(len(owners), 10)) % 3000
    questions, annotations, start = [], [], 0
    for qid, (image_id, length) in enumerate(zip(owners, lengths.tolist())):
        text = " ".join(f"w{w}" for w in words[start : start + length]) + "?"
        start += length
        given = [f"a{a}" for a in answers[qid]]
        questions.append(Question(qid, image_id, text))
        annotations.append(Annotation(qid, image_id, "what", "other", given[0], given))
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "questions_train.json", folder / "annotations_train.json"
    write_questions(paths[0], questions)
    write_annotations(paths[1], annotations)
    return paths


def regions(images: int, count: int, dim: int, seed: int = 0) -> Iterator[tuple[int, RegionFeatures]]:
    """``(image id, regions)`` of every image: ``count`` regions of ``dim`` ReLU-like float32 values (the same
    stream on every call with the same arguments)."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, size=(count, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(10, 170, size=(count, 2))], axis=1).astype(np.float32)
    for image_id in image_ids(images).tolist():
        features = rng.random((count, dim), dtype=np.float32)
        features -= 0.3
        np.maximum(features, 0, out=features)
        yield image_id, RegionFeatures(features, boxes, WIDTH, HEIGHT)


def write_tsv(path: Path, items: Iterator[tuple[int, RegionFeatures]]) -> int:
    """The bottom-up TSV layout: image_id, image_w, image_h, num_boxes, boxes, features (base64 float32)."""
    count = 0
    with open(path, "wb") as handle:
        for image_id, item in items:
            fields = [str(image_id).encode(), str(item.width).encode(), str(item.height).encode(),
                      str(item.num_regions).encode(), base64.b64encode(item.boxes.astype("<f4").tobytes()),
                      base64.b64encode(item.features.astype("<f4").tobytes())]
            handle.write(b"\t".join(fields) + b"\n")
            count += 1
    return count


def write_lmdb(path: Path, items: Iterator[tuple[int, RegionFeatures]], map_size: int) -> int:
    """An LMDB directory of pickled region records (the ViLBERT/VOLTA conversion of the bottom-up TSV)."""
    import lmdb

    count = 0
    env = lmdb.open(str(path), map_size=map_size, subdir=True, meminit=False, map_async=True)
    try:
        txn = env.begin(write=True)
        for image_id, item in items:
            record = {"image_id": image_id, "image_w": item.width, "image_h": item.height,
                      "num_boxes": item.num_regions, "boxes": item.boxes, "features": item.features}
            txn.put(str(image_id).encode(), pickle.dumps(record, protocol=4))
            count += 1
            if count % 1000 == 0:
                txn.commit()
                txn = env.begin(write=True)
        txn.commit()
        env.sync()
    finally:
        env.close()
    return count


def write_store(fmt: str, path: Path, images: int, count: int, dim: int) -> Path:
    """The store of ``fmt`` at ``path`` (a file for ``m2-hdf5`` and ``tsv``); returns its path."""
    items = regions(images, count, dim)
    if fmt == "memmap":
        write_memmap(path, items)
    elif fmt == "m2-hdf5":
        write_m2_hdf5(path, items)
    elif fmt == "npz-dir":
        write_npz_dir(path, items)
    elif fmt == "tsv":
        write_tsv(path, items)
    elif fmt == "lmdb":
        write_lmdb(path, items, map_size=images * count * (dim + 8) * 4 * 2 + (64 << 20))
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return path


def sparse_memmap(path: Path, images: int, count: int, dim: int) -> Path:
    """A memmap store of ``images`` x ``count`` regions whose ``features.f16`` is one hole (reads return zeros
    without disk I/O); index arrays and boxes are real. Written as the memmap layout documents it."""
    path.mkdir(parents=True)
    regions_total = images * count
    with open(path / "features.f16", "wb") as handle:
        handle.truncate(regions_total * dim * 2)
    xy = np.random.default_rng(0).uniform(0, 300, size=(count, 2))
    boxes = np.concatenate([xy, xy + 20], axis=1).astype("<f4")
    with open(path / "boxes.f32", "wb") as handle:
        block = np.tile(boxes, (min(images, 4096), 1)).tobytes()
        for start in range(0, images, 4096):
            handle.write(block[: min(4096, images - start) * count * 16])
    np.save(path / "ids.npy", image_ids(images))
    np.save(path / "offsets.npy", np.arange(images + 1, dtype=np.int64) * count)
    np.save(path / "sizes.npy", np.tile(np.asarray([[WIDTH, HEIGHT]], dtype=np.int64), (images, 1)))
    meta = {"format": "vlattn-memmap", "version": 1, "dim": dim, "num_images": images, "num_regions": regions_total}
    (path / META).write_text(json.dumps(meta))
    return path
