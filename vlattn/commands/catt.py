"""``vlattn catt ...`` commands: a typer sub-app mounted by the top-level CLI."""

from __future__ import annotations

import dataclasses
import os
import time
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(help="Causal Attention (CATT): global dictionaries computed ahead of training.",
                  no_args_is_help=True)


class DictionarySource(str, Enum):
    image = "image"
    word = "word"


@app.callback()
def catt() -> None:
    """Causal Attention (CATT) tools."""


@app.command()
def dictionary(
    source: DictionarySource = typer.Option(..., "--source", help="image: k-means over the training region "
                                            "features; word: over a trained model's word embeddings (--checkpoint)."),
    size: int = typer.Option(..., "--size", min=1, help="Entries K (paper: 500 image + 500 word for the "
                             "Transformer, 1000 image for BUTD; Table 6: 100, 200, 500)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML config whose data section names the "
                                          "data set (default: the built-in defaults)."),
    overrides: Optional[List[str]] = typer.Option(None, "--set", help="Override a config value (repeatable)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data root (overrides data.root)."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="word: the checkpoint (or run dir) whose "
                                              "word embeddings are clustered; its vocabulary is used."),
    sample: int = typer.Option(0, "--sample", min=0, help="image: regions drawn from whole training images in a "
                               "seeded order (0 = all of them; 4M COCO regions stream through k-means)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the region order and of k-means."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output file (default: <data root>/catt/<source>-<size>.npz)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """k-means dictionary written next to the data; train with it through the dictionary's `init: file`.

    Example: vlattn catt dictionary --source image --size 1000 --data data/coco, then
    --set model.options.image_dictionary.init=file --set model.options.image_dictionary.path=catt/image-1000.npz
    """
    import torch

    from vlattn.catt.dictionary import fit_entries
    from vlattn.catt.files import default_dictionary_path, replaceable_dictionary, write_dictionary
    from vlattn.validation import load_valid_config
    from vlattn.errors import ConfigError, DataError
    from vlattn.tasks import stage_of, task_of
    from vlattn.training.checkpoint import load_checkpoint, load_weights

    cfg = load_valid_config(config, overrides or [])
    if data is not None:
        cfg.data.root = str(data)
    target = out if out is not None else default_dictionary_path(cfg.data.root, source.value, size)
    if os.path.lexists(target):
        if not overwrite:
            raise DataError("exists; pass --overwrite to replace it", path=target)
        replaceable_dictionary(target)
    model, saved = None, None
    if source is DictionarySource.word:
        if checkpoint is None:
            raise ConfigError("--checkpoint: a word dictionary clusters a trained model's word embeddings (a fresh "
                              "run's k-means over its own initial embeddings happens in its prepare step)")
        saved = load_checkpoint(checkpoint)
        cfg.task = saved.config.task
    stage = stage_of(task_of(cfg.task), None)  # the task's data (captions or VQA questions) and its model
    loaded = stage.load_data(cfg, saved)
    if saved is not None:
        model = load_weights(stage.build_model(saved.config, loaded), saved)
    resources = loaded.prepare_resources(model, seed)
    dim = loaded.store.dim if source is DictionarySource.image else resources.word_embeddings.shape[1]
    typer.echo(f"k-means: {size} {source.value} entries of {dim} features from {cfg.data.root} ...", err=True)
    start = time.perf_counter()
    resources = dataclasses.replace(resources, generator=torch.Generator().manual_seed(seed))
    fitted = fit_entries(source.value, size, dim, resources, sample=sample or 2**62, threads=torch.get_num_threads())
    seconds = time.perf_counter() - start
    meta = {**fitted.meta, "data_root": str(cfg.data.root), "features": cfg.data.features, "run_seed": seed,
            "checkpoint": None if checkpoint is None else str(checkpoint), "seconds": round(seconds, 1)}
    write_dictionary(target, fitted.entries, meta, overwrite=overwrite)
    typer.echo(f"wrote {target}: {size} x {dim} ({fitted.meta.get('rows', fitted.meta.get('tokens'))} "
               f"{'regions' if source is DictionarySource.image else 'word tokens'}, {seconds:.1f} s)")
