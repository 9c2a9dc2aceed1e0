"""The extractors by name, built from options or from the record a store (or a run) keeps of one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from vlattn.config import lookup, parse_options
from vlattn.data.features.base import RegionFeatures
from vlattn.errors import ConfigError, DataError
from vlattn.pixels.grid import GridExtractor, GridOptions
from vlattn.pixels.images import LoadedImage
from vlattn.pixels.regions import RegionExtractor, RegionOptions
from vlattn.pixels.synth import SynthExtractor, SynthOptions
from vlattn.pixels.weights import WeightSource, source_of


class Extractor(Protocol):
    """Region features of a batch of images; ``max_side`` bounds the images it is given (:func:`load_image`)."""

    name: str
    dim: int
    max_side: int
    sha256: str

    def record(self) -> dict[str, Any]: ...

    def __call__(self, images: Sequence[LoadedImage]) -> list[RegionFeatures]: ...


@dataclass(frozen=True)
class ExtractorKind:
    """An extractor's options dataclass, its constructor and the weights it uses when ``--weights`` is not given
    (None: it must be given)."""

    options: type
    build: Callable[[Any, WeightSource | None, torch.device], Extractor]
    default_weights: WeightSource | None


EXTRACTORS: dict[str, ExtractorKind] = {
    "grid": ExtractorKind(GridOptions, GridExtractor, WeightSource("torchvision", name="DEFAULT")),
    "regions": ExtractorKind(RegionOptions, RegionExtractor, WeightSource("torchvision", name="DEFAULT")),
    "synth": ExtractorKind(SynthOptions, SynthExtractor, None),
}


def build_extractor(name: str, weights: WeightSource | None, options: Mapping[str, Any] | None,
                    device: torch.device) -> Extractor:
    """Extractor ``name`` with ``options`` (validated as config keys, errors naming ``--set``) and ``weights``
    (None: the extractor's default)."""
    kind = lookup(EXTRACTORS, name, "extractor", "--extractor")
    parsed = parse_options(kind.options, dict(options or {}), "--set")
    return kind.build(parsed, weights if weights is not None else kind.default_weights, device)


def extractor_from_record(record: Mapping[str, Any], device: torch.device, *, weights: WeightSource | None = None,
                          relative_to: Path | None = None) -> Extractor:
    """The extractor a record describes, with its weights (or ``weights`` in their place); weights whose SHA-256
    differs from the recorded one are refused: they would compute other features."""
    name = str(record.get("name"))
    if name not in EXTRACTORS:
        raise DataError(f"the features were made by {name!r}, which vlattn cannot run on pixels (extractors: "
                        f"{', '.join(EXTRACTORS)})")
    settings = {k: v for k, v in dict(record["settings"]).items() if k not in ("image_size", "categories")}
    source = weights if weights is not None else source_of(dict(record["weights"]), relative_to)
    if source.source == "file" and source.path is not None and not source.path.exists():
        raise DataError("the extractor's weights are not here; pass --weights FILE (their SHA-256 is checked)",
                        path=source.path)
    extractor = build_extractor(name, source, settings, device)
    recorded = record["weights"].get("sha256")
    if extractor.sha256 != recorded:
        raise DataError(f"--weights: weights with SHA-256 {extractor.sha256[:12]}..., but the features were made with "
                        f"{str(recorded)[:12]}...")
    return extractor


def check_request(record: Mapping[str, Any], name: str | None, dim: Any) -> None:
    """Refuse an ``--extractor`` other than the recorded one, and an extractor making ``dim``-d features when the
    record (and so the model) has another size."""
    if name is not None and name != record.get("name"):
        raise ConfigError(f"--extractor {name}: the run was trained on {record.get('name')!r} features; "
                          f"extract with {record.get('name')!r} (or train on {name!r} features)")
    if record.get("dim") != dim:
        raise ConfigError(f"the extractor makes {dim}-d features, but the run's model reads {record.get('dim')}-d "
                          f"features of {record.get('name')!r}")
