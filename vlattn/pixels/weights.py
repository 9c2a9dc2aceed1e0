"""Where an extractor's weights come from: a local file, torchvision's named weights, or a seeded random init.

``--weights`` takes

- a path: a state dict saved by ``torch.save`` (read with ``weights_only=True``; a dict holding it under ``model``
  or ``state_dict`` is unwrapped) or a ``.safetensors`` file;
- ``torchvision`` or ``torchvision:NAME`` (e.g. ``torchvision:IMAGENET1K_V2``): the architecture's named weights
  (``DEFAULT`` when no name), which torchvision downloads into its cache on first use;
- ``random`` or ``random:SEED``: a random initialisation from ``SEED`` (0 by default) — for tests and timings,
  never for features anyone trains on.

Whatever the source, the weights are identified by the SHA-256 of the loaded state (:func:`vlattn.io.state_sha256`),
recorded with every store and checked again when a run extracts on the fly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch
from torch import nn

from vlattn.errors import DataError
from vlattn.io import state_sha256

SOURCES = ("file", "torchvision", "random")


@dataclass(frozen=True)
class WeightSource:
    """``source`` one of :data:`SOURCES`; ``path`` (file), ``name`` (torchvision) or ``seed`` (random)."""

    source: str
    path: Path | None = None
    name: str | None = None
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        """The JSON fields of the record's ``weights`` (without the hash)."""
        if self.source == "file":
            return {"source": "file", "path": str(self.path)}
        if self.source == "torchvision":
            return {"source": "torchvision", "name": self.name}
        return {"source": "random", "seed": self.seed}


def parse_weights(text: str) -> WeightSource:
    """The source ``--weights`` names (see the module docstring)."""
    head, _, tail = text.partition(":")
    if head == "random":
        if tail and not tail.isdigit():
            raise DataError(f"--weights {text}: random:SEED needs a non-negative integer seed")
        return WeightSource("random", seed=int(tail or 0))
    if head == "torchvision":
        return WeightSource("torchvision", name=tail or "DEFAULT")
    path = Path(text)
    if not path.exists():
        raise DataError("weights file not found (or pass torchvision[:NAME] or random[:SEED])", path=path)
    return WeightSource("file", path=path)


def source_of(weights: dict[str, Any], relative_to: Path | None = None) -> WeightSource:
    """The source a record's ``weights`` describes; a relative file path is taken from ``relative_to``."""
    kind = weights.get("source")
    if kind == "file":
        path = Path(str(weights.get("path")))
        return WeightSource("file", path=relative_to / path if relative_to is not None and not path.is_absolute()
                            else path)
    if kind == "torchvision":
        return WeightSource("torchvision", name=str(weights.get("name") or "DEFAULT"))
    if kind == "random":
        return WeightSource("random", seed=int(weights.get("seed", 0)))
    raise DataError(f"extractor record: unknown weights source {kind!r} (valid: {', '.join(SOURCES)})")


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (safetensors, or ``torch.save`` read with ``weights_only=True``)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch and safetensors raise many types for foreign or damaged files
        raise DataError(f"cannot read weights: {' '.join(str(err).split())[:300]}", path=path) from None
    for key in ("model", "state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(key), dict):
            loaded = loaded[key]
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise DataError("not a state dict of tensors", path=path)
    return loaded


def load_weights(model: nn.Module, source: WeightSource, named: Callable[[str], Any] | None = None) -> str:
    """Put ``source``'s weights into ``model`` (built randomly initialised) and return their SHA-256.

    ``named(name)`` returns torchvision's weights enum member for ``torchvision:NAME`` (None: the architecture has
    no named weights)."""
    if source.source == "file":
        assert source.path is not None
        state = read_state_dict(source.path)
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise DataError(f"weights do not fit the extractor: {' '.join(str(err).split())[:300]}",
                            path=source.path) from None
    elif source.source == "torchvision":
        if named is None:
            raise DataError(f"--weights torchvision:{source.name}: this extractor has no torchvision weights")
        try:
            enum = named(source.name or "DEFAULT")
        except (KeyError, ValueError, AttributeError):
            raise DataError(f"--weights torchvision:{source.name}: no such torchvision weights") from None
        model.load_state_dict(enum.get_state_dict(progress=False))
    return state_sha256(model.state_dict())


M = TypeVar("M", bound=nn.Module)


def build_seeded(factory: Callable[[], M], seed: int) -> M:
    """``factory()`` initialised from ``seed``; the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()
