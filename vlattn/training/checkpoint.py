"""Checkpoints: weights, config, named vocabularies (+ training state), written and read as one directory.

Layout of a checkpoint directory::

    model.safetensors      the weights; its metadata records the SHA-256 of every vocabulary (below) and the
                           extractor record of the feature store the run trained on, when it has one
    config.json            the resolved config of the run (``task``, model, data, train, eval)
    vocab-<name>.json      one file per named vocabulary of the task: ``vocab-words.json`` (captions,
                           questions), ``vocab-answers.json`` (VQA); each in its class's own JSON format
    train_state.pt         optimizer state, RNG states and loop counters (checkpoints of a run only)
    decoding.json          captioning with eval.beam_size auto: the beam size chosen on validation for these
                           weights, added after training (vlattn.tasks.beam_choice)

The weights and the vocabularies belong together (row i of an embedding or classifier is entry i of a
vocabulary), so the weights file carries ``vlattn.vocabularies`` metadata: ``{name: sha256}`` of each
vocabulary's entries (:func:`vocabulary_hash`). Reading a vocabulary checks its hash against the weights:
a vocabulary file that was replaced or edited is a one-line :class:`~vlattn.errors.DataError`, never wrong
captions.

A checkpoint is written as a whole (:mod:`vlattn.io`): files go into a marked temporary directory
``.<dir>.<pid>.<id>.tmp`` next to it, are flushed to disk, its marker becomes ``kind: checkpoint`` (with the
``owner``: the id of the run writing it) and the directory replaces ``<dir>`` by renames
(:func:`vlattn.io.replace_dir`). The checkpoint it replaces must be one vlattn wrote for the same owner, holding
nothing else, checked at that moment: a user's folder named ``last`` is left in place with an error. A crash at
any moment leaves either the old or the new checkpoint readable, never a mix. Before a run writes checkpoints
again, :func:`recover_checkpoint` finishes a swap that a crash cut between its two renames and deletes the
leftovers of killed writers, only those proven vlattn's by their marker (a first checkpoint whose write was
killed leaves no checkpoint, only a leftover).

``train_state.pt`` holds only tensors and plain Python containers (optimizer state, RNG states,
counters) and is read with ``torch.load(..., weights_only=True)`` (:func:`vlattn.torchload.load_torch_file`: a
damaged or refused file is a one-line error naming it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from vlattn.config import Config, config_from_dict, save_config
from vlattn.errors import DataError, WriteError
from vlattn.io import (
    MARKER,
    complete_dir,
    finish_files,
    foreign_entries,
    make_temporary_dir,
    read_marker,
    recover_swap,
    remove_owned,
    remove_stale_temporaries,
    replace_dir,
    stale_temporaries,
    writing,
)
from vlattn.torchload import load_torch_file

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "train_state.pt"
CHECKPOINT_KIND = "checkpoint"  # marker kind of a checkpoint directory
VOCABULARIES_KEY = "vlattn.vocabularies"  # safetensors metadata: JSON {name: sha256}
EXTRACTOR_KEY = "vlattn.extractor"  # safetensors metadata: the training store's extractor record (JSON), if any


class NamedVocabulary(Protocol):
    """What a checkpoint needs of a vocabulary: its entries in index order and JSON persistence
    (:class:`~vlattn.data.vocab.Vocabulary`, :class:`~vlattn.data.vqa_answers.AnswerVocabulary`)."""

    itos: list[str]

    def save(self, path: str | Path) -> None: ...


V = TypeVar("V", bound=NamedVocabulary)


def vocabulary_file(name: str) -> str:
    """File name of vocabulary ``name`` in a checkpoint or run directory: ``vocab-<name>.json``."""
    return f"vocab-{name}.json"


def vocabulary_hash(vocab: NamedVocabulary) -> str:
    """SHA-256 of the vocabulary's entries in index order (independent of the file's formatting)."""
    return hashlib.sha256(json.dumps(list(vocab.itos), ensure_ascii=False).encode("utf-8")).hexdigest()


def save_vocabularies(directory: Path, vocabularies: Mapping[str, NamedVocabulary]) -> None:
    """Write each vocabulary as ``directory/vocab-<name>.json`` (atomically, file by file)."""
    for name, vocab in vocabularies.items():
        vocab.save(directory / vocabulary_file(name))


@dataclass
class Checkpoint:
    """What a checkpoint directory holds, loaded: the config, the training state (when asked for) and the
    vocabulary hashes recorded with the weights; vocabularies are read by :meth:`vocabulary`, the weights by
    :func:`load_weights`."""

    path: Path
    config: Config
    train_state: dict[str, Any] | None
    hashes: dict[str, str] = field(default_factory=dict)  # vocabulary name -> sha256; {}: none recorded
    extractor: dict[str, Any] | None = None  # the training features' extractor record (vlattn.data.features.record)

    def vocabulary(self, name: str, load: Callable[[Path], V]) -> V:
        """Vocabulary ``name`` read by ``load`` (e.g. ``Vocabulary.load``), checked against the hash recorded
        with the weights."""
        file = self.path / vocabulary_file(name)
        if self.hashes and name not in self.hashes:
            raise DataError(f"the weights record no {name!r} vocabulary (recorded: {', '.join(sorted(self.hashes))})",
                            path=self.path / MODEL_FILE)
        if not file.is_file():
            raise DataError(f"checkpoint has no {name!r} vocabulary", path=file)
        vocab = load(file)
        expected, actual = self.hashes.get(name), vocabulary_hash(vocab)
        if expected is not None and actual != expected:
            raise DataError(
                f"vocabulary does not match the weights (sha256 {actual[:12]}..., the weights were trained with "
                f"{expected[:12]}...); restore the checkpoint's own {vocabulary_file(name)}",
                path=file,
            )
        return vocab


def replaceable_checkpoint(owner: str | None) -> Callable[[Path], None]:
    """The check :func:`~vlattn.io.replace_dir` runs on a checkpoint about to be replaced: a directory (not a
    link) marked as a checkpoint of ``owner`` (a run's id; None: a checkpoint outside a run) holding only what
    its marker lists."""

    def check(path: Path) -> None:
        marker = None if path.is_symlink() or not path.is_dir() else read_marker(path)
        if marker is None or marker["kind"] != CHECKPOINT_KIND:
            raise DataError(f"not a checkpoint written by vlattn (no {MARKER} of kind checkpoint); vlattn leaves it "
                            "in place: move it away to continue", path=path)
        if marker.get("owner") != owner:
            raise DataError("a checkpoint of another run; vlattn leaves it in place: move it away to continue",
                            path=path)
        foreign = foreign_entries(path, marker["entries"])
        if foreign:
            raise DataError(f"holds files vlattn did not write: {', '.join(foreign[:5])}; vlattn leaves the "
                            "checkpoint in place: move them away to continue", path=path)

    return check


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    config: Config,
    vocabularies: Mapping[str, NamedVocabulary],
    train_state: dict[str, Any] | None = None,
    extractor: Mapping[str, Any] | None = None,
    *,
    owner: str | None = None,
) -> Path:
    """Write a checkpoint directory atomically (see module docstring); ``extractor`` is the record of the training
    features' extractor, ``owner`` the id of the run writing it. Returns its path. A failed write raises
    :class:`~vlattn.errors.WriteError` and leaves the previous one."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
    tmp = make_temporary_dir(path)
    try:
        with writing(path):
            hashes = {name: vocabulary_hash(vocab) for name, vocab in vocabularies.items()}
            metadata = {VOCABULARIES_KEY: json.dumps(hashes, sort_keys=True)}
            if extractor is not None:
                metadata[EXTRACTOR_KEY] = json.dumps(dict(extractor), sort_keys=True)
            try:
                save_model(model, str(tmp / MODEL_FILE), metadata=metadata)
            except SafetensorError as err:  # the writer's I/O errors (disk full, file too large) come as this type
                raise WriteError(path, err) from None
            save_config(config, tmp / CONFIG_FILE)
            save_vocabularies(tmp, vocabularies)
            if train_state is not None:
                try:
                    torch.save(train_state, tmp / STATE_FILE)
                except RuntimeError as err:  # torch's zip writer reports a failed write as a RuntimeError
                    raise WriteError(path, str(err).splitlines()[0]) from None
            complete_dir(tmp, CHECKPOINT_KIND, owner=owner)
            finish_files(tmp)
            replace_dir(tmp, path, replaceable_checkpoint(owner))
    finally:
        if tmp.exists():
            remove_owned(tmp)
    return path


def is_complete(path: Path) -> bool:
    """``path`` holds a checkpoint (weights and config; a checkpoint directory only appears complete)."""
    return (path / MODEL_FILE).is_file() and (path / CONFIG_FILE).is_file()


def recover_checkpoint(path: str | Path) -> str | None:
    """Make checkpoint ``path`` whole again after a crash, before a run writes it again (the caller holds the run's
    lock, so no writer is alive): finish a swap cut between its renames, delete leftovers of killed writers
    (only temporaries proven vlattn's by their marker). Returns a note of what was found, or None."""
    path = Path(path)
    leftovers = stale_temporaries(path, include_own=True)
    if not leftovers:
        return None
    note = f"{path}: removed {len(leftovers)} leftover(s) of an interrupted checkpoint write"
    swapped = recover_swap(path, leftovers)
    if swapped is not None:
        leftovers.remove(swapped)
        note = f"{path}: completed a checkpoint swap interrupted between its renames"
    for entry in leftovers:
        remove_owned(entry)
    return note


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory for ``path``: a checkpoint itself, or a run dir (its ``best``, else ``last``)."""
    path = Path(path)
    for candidate in (path, path / "checkpoints" / "best", path / "checkpoints" / "last"):
        if is_complete(candidate):
            return candidate
    raise DataError("no checkpoint found (expected model.safetensors + config.json, or a run dir)", path=path)


def weights_metadata(file: Path) -> dict[str, str]:
    """The metadata of a weights file."""
    try:
        with safe_open(str(file), framework="pt") as weights:
            return weights.metadata() or {}
    except (SafetensorError, OSError) as err:
        raise DataError(f"cannot read weights: {err}", path=file) from None


def recorded_extractor(file: Path) -> dict[str, Any] | None:
    """The extractor record in a weights file's metadata (None: trained on a store without one)."""
    text = weights_metadata(file).get(EXTRACTOR_KEY)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        raise DataError(f"malformed {EXTRACTOR_KEY} metadata", path=file)
    return record


def recorded_hashes(file: Path) -> dict[str, str]:
    """The ``{vocabulary name: sha256}`` metadata of a weights file ({} when it records none)."""
    metadata = weights_metadata(file)
    if VOCABULARIES_KEY not in metadata:
        return {}
    try:
        hashes = json.loads(metadata[VOCABULARIES_KEY])
    except json.JSONDecodeError:
        hashes = None
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise DataError(f"malformed {VOCABULARIES_KEY} metadata", path=file)
    return hashes


def load_checkpoint(path: str | Path, *, with_state: bool = False) -> Checkpoint:
    """Read config, vocabulary hashes and (optionally) training state; vocabularies are read by
    :meth:`Checkpoint.vocabulary`, the model by :func:`load_weights`."""
    directory = resolve_checkpoint(path)
    try:
        config = config_from_dict(json.loads((directory / CONFIG_FILE).read_text()))
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON: {err}", path=directory / CONFIG_FILE) from None
    state = None
    if with_state and (directory / STATE_FILE).is_file():
        state = load_torch_file(directory / STATE_FILE, "training state")
        if not isinstance(state, dict):
            raise DataError(f"not a training state: holds a {type(state).__name__}, not a mapping",
                            path=directory / STATE_FILE)
    weights = directory / MODEL_FILE
    return Checkpoint(directory, config, state, recorded_hashes(weights), recorded_extractor(weights))


def load_weights(model: torch.nn.Module, checkpoint: Checkpoint | str | Path) -> torch.nn.Module:
    """Load ``model.safetensors`` into ``model`` (strict), naming the file on mismatch."""
    directory = checkpoint.path if isinstance(checkpoint, Checkpoint) else resolve_checkpoint(checkpoint)
    file = directory / MODEL_FILE
    try:
        missing, unexpected = load_model(model, str(file), strict=False)
    except Exception as err:  # safetensors raises several types for corrupt files and shape mismatches
        raise DataError(f"cannot load weights: {err}", path=file) from None
    if missing or unexpected:
        raise DataError(f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}", path=file)
    return model


def load_weights_from(model: torch.nn.Module, checkpoint: Checkpoint, prefix: str, fresh: tuple[str, ...]) -> None:
    """Load into ``model`` the checkpoint's tensors named ``prefix + name`` for every parameter and buffer ``name``
    of ``model`` except those under ``fresh`` (prefixes left as initialised, e.g. a fine-tuning head); a missing
    tensor or another shape is a ``DataError`` naming the file and the tensors."""
    file = checkpoint.path / MODEL_FILE
    state = model.state_dict()
    wanted = [name for name in state if not name.startswith(fresh)]
    try:
        with safe_open(str(file), framework="pt") as handle:
            stored = set(handle.keys())
            missing = [name for name in wanted if prefix + name not in stored]
            if missing:
                raise DataError(f"weights do not match the model: no {prefix}{missing[0]} (and {len(missing) - 1} more "
                                "missing); was the checkpoint trained with this config's model section?", path=file)
            loaded = {name: handle.get_tensor(prefix + name) for name in wanted}
    except (SafetensorError, OSError) as err:
        raise DataError(f"cannot load weights: {err}", path=file) from None
    wrong = [name for name in wanted if loaded[name].shape != state[name].shape]
    if wrong:
        name = wrong[0]
        raise DataError(f"weights do not match the model: {prefix}{name} has shape {tuple(loaded[name].shape)}, the "
                        f"model's {name} {tuple(state[name].shape)} ({len(wrong)} tensors differ)", path=file)
    with torch.no_grad():
        for name in wanted:
            state[name].copy_(loaded[name])
