"""Importers of other projects' released checkpoints (``vlattn import-checkpoint --format NAME``).

``FORMATS`` maps a format name to a reader ``(checkpoint, word_list, heads=, base=, answers=) -> Imported``
(``m2-official``: the released M2 captioner; ``lxmert-hf``: LXMERT in transformers' or the released code's names,
a VQA model); :func:`import_checkpoint` writes the result as a vlattn run directory that ``vlattn eval``,
``vlattn caption`` / ``vlattn answer`` and ``vlattn train --init`` use::

    RUN_DIR/checkpoints/best/   model.safetensors, config.json, vocab-words.json (+ vocab-answers.json for VQA)
    RUN_DIR/config.yaml         the imported run's config
    RUN_DIR/vocab-*.json        the vocabularies (as in a trained run directory)
    RUN_DIR/import.json         provenance: format, source files and their SHA-256, the inferred layout
    RUN_DIR/.vlattn.json        the run marker (:mod:`vlattn.training.rundir`)

The directory is assembled next to ``RUN_DIR`` in a marked vlattn temporary (``.RUN_DIR.<pid>.<id>.tmp``,
:func:`vlattn.io.make_temporary_dir`) and renamed into place only when complete; an existing, non-empty ``RUN_DIR``
is refused (nothing is overwritten; an empty one is filled, never replaced). A failed import removes its own temporary; one left by
a killed import (its process gone, its marker proving it vlattn's) is removed by the next import of the same
``RUN_DIR``, never a directory vlattn did not write.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vlattn.config import Config, lookup, save_config
from vlattn.data.vocab import Vocabulary
from vlattn.errors import DataError
from vlattn.importers.lxmert_hf import read_lxmert
from vlattn.importers.m2_official import Imported, read_released
from vlattn.io import (
    MARKER,
    atomic_write_text,
    make_temporary_dir,
    new_id,
    remove_owned,
    remove_stale_temporaries,
    rename_noreplace,
    write_marker,
    writing,
)
from vlattn.models import build_captioner, build_vqa_model
from vlattn.training.checkpoint import save_checkpoint, save_vocabularies
from vlattn.training.rundir import RUN_KIND

FORMATS: dict[str, Callable[..., Imported]] = {"m2-official": read_released, "lxmert-hf": read_lxmert}


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Fit:
    """A partial load: how many tensors ``loaded``, the model's parameters left ``initialised`` and the checkpoint
    tensors that did not fit (``unfit``, with their shapes)."""

    loaded: int
    initialised: list[str]
    unfit: list[str]


def load_fitting(model: torch.nn.Module, state: dict[str, Any]) -> Fit:
    """Load the tensors of ``state`` whose name and shape are the model's; the model keeps its own values for the
    rest."""
    own = model.state_dict()
    fitting = {name: tensor for name, tensor in state.items() if name in own and own[name].shape == tensor.shape}
    model.load_state_dict(fitting, strict=False)
    unfit = [f"{name} {tuple(tensor.shape)}" for name, tensor in sorted(state.items()) if name not in fitting]
    return Fit(len(fitting), sorted(set(own) - set(fitting)), unfit)


def import_checkpoint(
    fmt: str, checkpoint: str | Path, word_list: str | Path | None, out: str | Path, *, heads: int | None = None,
    base: Config | None = None, answers: str | Path | None = None,
) -> dict[str, Any]:
    """Import ``checkpoint`` of format ``fmt`` with its ``word_list`` (and, for a VQA model, its ``answers``) into
    the new run directory ``out``; returns the provenance record written to ``out/import.json``."""
    reader = lookup(FORMATS, fmt, "checkpoint format", "--format")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError("exists and is not empty; choose a new run directory", path=out)
    if not out.parent.is_dir():  # checked before the (possibly large) checkpoint is read
        raise DataError(f"cannot create the run directory: {out.parent} is not an existing directory", path=out)
    imported = reader(checkpoint, word_list, heads=heads, base=base, answers=answers)
    vocabularies: dict[str, Any] = {"words": imported.vocab}
    with torch.random.fork_rng(devices=[]):  # what a partial import leaves to the model's own initialisation
        torch.manual_seed(imported.config.train.seed)
        if imported.answers is None:
            model = build_captioner(imported.config.model, len(imported.vocab), pad_id=Vocabulary.PAD)
        else:
            vocabularies["answers"] = imported.answers
            model = build_vqa_model(imported.config.model, len(imported.vocab), len(imported.answers))
    fit = load_fitting(model, imported.state) if imported.partial else None
    if fit is None:
        model.load_state_dict(imported.state, strict=True)
    sources = {"checkpoint": checkpoint, "word_list": word_list, "answers": answers}
    record: dict[str, Any] = {"format": fmt}
    for name, path in sources.items():
        if path is not None:
            record[name] = str(path)
            record[f"{name}_sha256"] = file_sha256(path) if Path(path).is_file() else {
                file.name: file_sha256(file) for file in sorted(Path(path).iterdir()) if file.is_file()}
    record.update({
        "layout": None if imported.layout is None else dataclasses.asdict(imported.layout),
        "tensors": len(imported.state),
        "dropped_runtime_buffers": imported.dropped,
    })
    if fit is not None:
        record.update(loaded=fit.loaded, initialised=fit.initialised, not_loaded=fit.unfit)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(out)  # left by an import of this name that was killed
    staging = make_temporary_dir(out)
    try:
        with writing(out):
            run_id = new_id()
            save_checkpoint(staging / "checkpoints" / "best", model, imported.config, vocabularies, owner=run_id)
            save_config(imported.config, staging / "config.yaml")
            save_vocabularies(staging, vocabularies)
            atomic_write_text(staging / "import.json", json.dumps(record, indent=1))
            write_marker(staging, RUN_KIND, id=run_id)
            try:
                if out.is_dir() and not out.is_symlink():  # the user's empty directory: filled, the marker last
                    for entry in sorted(staging.iterdir(), key=lambda e: e.name == MARKER):
                        rename_noreplace(entry, out / entry.name)
                else:
                    rename_noreplace(staging, out)
            except FileExistsError:
                raise DataError("appeared while importing; left as it is", path=out) from None
    finally:
        if staging.exists():
            remove_owned(staging)  # this call's own temporary, not renamed: the import failed
    return record
