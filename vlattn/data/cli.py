"""``vlattn data ...`` commands: a typer sub-app mounted by the top-level CLI."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from vlattn.data.features import FORMATS, convert_store, open_store
from vlattn.errors import ConfigError

app = typer.Typer(
    help="Data sets and region-feature stores: convert layouts, generate synthetic scenes.", no_args_is_help=True
)


@app.callback()
def data() -> None:
    """Data sets and region-feature stores."""


StoreFormat = Enum("StoreFormat", {name: name for name in FORMATS}, type=str)  # type: ignore[misc]


@app.command()
def convert(
    source: Path = typer.Option(..., "--from", help="Feature store to read (layout detected): memmap dir, M2 .h5, "
                                "npz dir (incl. MCAN COCO_<split>_<id>.jpg.npz trees), self-critical *_att/*_box, "
                                "bottom-up/LXMERT .tsv file or shard dir, LMDB."),
    dest: Path = typer.Option(..., "--to", help="Where to write the new store (a file for m2-hdf5, else a directory)."),
    format: StoreFormat = typer.Option(..., "--format", help="Layout of the new store."),
    dim: Optional[int] = typer.Option(None, "--dim", help="Expected feature dimension D (orients npz 'x')."),
    orientation: Optional[str] = typer.Option(None, "--orientation", help="npz 'x' storage when K == D: kd or dk."),
    box_units: Optional[str] = typer.Option(None, "--box-units", help="self-critical boxes: pixels or normalized "
                                            "(default: detected)."),
    image_sizes: Optional[Path] = typer.Option(None, "--image-sizes", help="JSON with images[].id/width/height "
                                               "(cocotalk.json, captions_*.json) for self-critical stores."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing destination."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Processes parsing a TSV (default: the usable "
                                       "CPUs, at most 8)."),
) -> None:
    """Convert region features from any readable layout to the M2 HDF5, npz-per-image or memmap layout.

    A TSV is read in one sequential pass (progress in bytes), parsed in --jobs processes. Example:
    vlattn data convert --from trainval_36/trainval_resnet101_faster_rcnn_genome_36.tsv --to feats --format memmap
    """
    store = open_store(source, dim=dim, orientation=orientation, box_units=box_units, image_sizes=image_sizes)
    count = convert_store(store, dest, format.value, overwrite=overwrite, progress=progress, jobs=jobs)
    typer.echo(f"wrote {count} images ({store.dim}-d features) to {dest} as {format.value}")


# `vlattn data synth` (the synthetic scene generator, vlattn/data/synth/) is added here as a second command.


@app.command()
def synth(
    out: Path = typer.Option(..., "--out", help="Directory to create (appears only when complete)."),
    images: int = typer.Option(2000, "--images", help="Number of images (train + val + test)."),
    seed: int = typer.Option(0, "--seed", help="Random seed; the same seed gives the same data set."),
    confound: Optional[List[str]] = typer.Option(
        None, "--confound", help="attribute:shape pair bound together in the train split, e.g. red:circle or "
        "large:star (repeatable). val/test stay unconfounded; statistics go to OUT/confound.json."),
    confound_p: float = typer.Option(0.9, "--confound-p", help="Probability that a train object of the shape has the attribute."),
    cooccur: Optional[List[str]] = typer.Option(
        None, "--cooccur", help="shape:shape pair A:B, e.g. circle:star: a train image with an A holds a B with "
        "probability --cooccur-p (repeatable; val/test independent)."),
    cooccur_p: float = typer.Option(0.9, "--cooccur-p", help="Probability that a train image with an A holds a B."),
    ambiguous: float = typer.Option(
        0.0, "--ambiguous", help="Fraction of objects (every split) drawn in shadow: colour barely visible, "
        "not taught to the extractor; captions still say it (needs --confound or --cooccur)."),
    ambiguous_contrast: float = typer.Option(
        0.0, "--ambiguous-contrast", help="How much colour the shadowed objects keep (0: none, 1: all)."),
    missed: float = typer.Option(
        0.0, "--missed", help="Fraction of the B objects of --cooccur A:B the detector misses (every split)."),
    feature_dim: int = typer.Option(512, "--feature-dim", help="Dimension D of the region features."),
    grid: int = typer.Option(0, "--grid", help="Also write a K x K grid of features per image to OUT/grid_features (0 = no)."),
    image_size: int = typer.Option(80, "--image-size", help="Image side in pixels."),
    val: Optional[int] = typer.Option(None, "--val", help="Val images (default: a tenth)."),
    test: Optional[int] = typer.Option(None, "--test", help="Test images (default: a tenth)."),
    epochs: Optional[int] = typer.Option(
        None, "--epochs", help="Training epochs of the feature-extractor CNN (default: at least 3 and 250 steps)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT."),
) -> None:
    """Generate the synthetic captioning + VQA data set (images, captions, VQA, ground truth, features).

    Example: vlattn data synth --out data/synth --confound red:circle --confound-p 0.9
    (docs/catt.md: the bias benchmark's set adds --cooccur circle:star --ambiguous 0.5 --missed 0.5)
    """
    from vlattn.data.synth import Confound, generate

    evidence = {"cooccur_p": cooccur_p, "ambiguous": ambiguous, "contrast": ambiguous_contrast, "missed": missed}
    if confound or cooccur:
        spec = Confound.parse(confound or [], confound_p, cooccur=cooccur or [], **evidence)
    elif ambiguous or ambiguous_contrast or missed:
        raise ConfigError("--ambiguous, --ambiguous-contrast and --missed need --confound or --cooccur")
    else:
        spec = None
    generate(out, images, seed, spec, feature_dim, image_size=image_size, val_size=val, test_size=test, grid=grid,
             extractor_epochs=epochs, overwrite=overwrite, log=typer.echo)
    typer.echo(f"wrote {images} images to {out}")
