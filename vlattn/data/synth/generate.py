"""``generate``: the whole synthetic captioning + VQA data set, written atomically to one directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from vlattn.data.cache_dir import owned_cache_entries
from vlattn.data.features.storage import atomic_dir
from vlattn.errors import ConfigError

from .confound import Confound, attribute_sampler
from .featurize import featurize
from .lexicon import COLOURS, SHAPES, SIZES
from .outputs import (
    write_captions,
    write_confound,
    write_features,
    write_gqa,
    write_images,
    write_nlvr2,
    write_scenes,
    write_vqa,
    write_wordpiece_vocab,
)
from .sample import make_sample

DEFAULT_IMAGES = 2000
DEFAULT_IMAGE_SIZE = 80
MIN_IMAGE_SIZE = 32
SYNTHETIC_SET = "synthetic-set"  # kind in the marker of a generated data set (--overwrite replaces only these)


def split_names(images: int, val_size: int | None, test_size: int | None) -> list[str]:
    """The split of each image in id order: train first, then val, then test.

    ``val_size``/``test_size`` default to a tenth of the images each (at least one).
    """
    val = max(1, images // 10) if val_size is None else val_size
    test = max(1, images // 10) if test_size is None else test_size
    if val < 0 or test < 0 or images - val - test < 1:
        raise ConfigError(f"{images} images cannot hold {val} val + {test} test images and a train split")
    return ["train"] * (images - val - test) + ["val"] * val + ["test"] * test


def generate(
    out: str | Path,
    images: int = DEFAULT_IMAGES,
    seed: int = 0,
    confound: Confound | None = None,
    feature_dim: int = 512,
    *,
    image_size: int = DEFAULT_IMAGE_SIZE,
    val_size: int | None = None,
    test_size: int | None = None,
    grid: int = 0,
    extractor_epochs: int | None = None,
    answer_noise: float = 0.1,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Generate ``images`` synthetic images with captions, VQA, ground truth and region features.

    Writes into ``out`` (which appears only when complete; an existing ``out`` is replaced only with
    ``overwrite`` and only if it is a data set generated here, holding nothing else but the caches vlattn wrote into
    its ``cache/`` directory, :func:`~vlattn.data.cache_dir.owned_cache_entries`)::

        dataset.json                      Karpathy split file (image ids 1..images; train, val, test)
        captions_val.json, captions_test.json   COCO caption annotations of val/test
        scenes.json                       options, extractor report, objects and regions per image
        features/                         memmap store: one D-dim vector per detection box
        grid_features/                    memmap store of the grid x grid cells (only if grid > 0)
        extractor.safetensors             the region CNN (``vlattn features extract --extractor synth``)
        vqa/questions_<split>.json, vqa/annotations_<split>.json   VQA v2 layout
        gqa/<split>_balanced_questions.json   the same questions in GQA's layout (data/synth/pairs.py)
        nlvr2/<split>.json                statements about image pairs, LXMERT's NLVR2 layout
        vocab.txt                         a BERT WordPiece vocabulary of every synthetic text
        images/synth_<id>.png             the rendered images (image_size x image_size RGB)
        confound.json                     options and realised co-occurrence (only if confounded)
        .vlattn.json                      marker: a synthetic data set written by vlattn, and its entries

    ``extractor_epochs`` None trains the CNN for at least 3 epochs and 250 steps.
    Everything is a deterministic function of the arguments (for a given torch build and thread count).
    ``log`` receives one line per stage with its duration.
    """
    splits = split_names(images, val_size, test_size)
    if image_size < MIN_IMAGE_SIZE:
        raise ConfigError(f"image_size must be at least {MIN_IMAGE_SIZE} pixels, got {image_size}")
    epochs_ok = extractor_epochs is None or extractor_epochs >= 1
    if feature_dim < 1 or grid < 0 or not epochs_ok or not 0.0 <= answer_noise <= 1.0:
        raise ConfigError("need feature_dim >= 1, grid >= 0, extractor_epochs >= 1 and 0 <= answer_noise <= 1")
    clock = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal clock
        if log is not None:
            log(f"{name}: {time.perf_counter() - clock:.1f}s")
        clock = time.perf_counter()

    samplers = {split: attribute_sampler(confound, split) for split in set(splits)}
    with atomic_dir(out, overwrite, kind=SYNTHETIC_SET, replaces=(SYNTHETIC_SET,), what="a synthetic data set",
                    also_owned=owned_cache_entries) as root:  # the caches training wrote into it go with it
        samples = [
            make_sample(
                image_id, split, seed=seed, image_size=image_size, attributes=samplers[split], answer_noise=answer_noise,
                confound=confound,
            )
            for image_id, split in enumerate(splits, start=1)
        ]
        stage(f"{images} scenes, captions and questions")
        write_images(root, samples)
        stage("images written")
        featurized = featurize(samples, feature_dim=feature_dim, grid=grid, epochs=extractor_epochs, seed=seed)
        stage("extractor trained, features extracted")
        info = {
            "seed": seed, "images": images, "image_size": image_size, "grid": grid, "answer_noise": answer_noise,
            "next_to_gap": samples[0].scene.next_to_gap, "shapes": list(SHAPES), "colours": list(COLOURS),
            "sizes": list(SIZES), "extractor": featurized.report,
            "confound": confound.to_json() if confound is not None else None,
        }
        write_features(root, samples, featurized)
        write_captions(root, samples)
        write_scenes(root, samples, info)
        write_vqa(root, samples)
        write_gqa(root, samples)
        write_wordpiece_vocab(root, samples, write_nlvr2(root, samples, seed))
        if confound is not None:
            write_confound(root, samples, confound)
        stage("files written")
    return Path(out)
