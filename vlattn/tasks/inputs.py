"""Region inputs of the Python predictors (:class:`~vlattn.tasks.captioner.Captioner`,
:class:`~vlattn.tasks.answerer.Answerer`): a feature store on disk with image ids, or features (and boxes) given as
arrays, checked against the model that reads them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from vlattn.attention import ATTENTION
from vlattn.config import ModelConfig, parse_options
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.memory import MemoryStore
from vlattn.errors import ConfigError, DataError
from vlattn.models import MODELS
from vlattn.tasks.base import check_feature_dim


def _specs(node: Any) -> Iterator[dict[str, Any]]:
    """Every component mapping (``{"name", "options"}``) in a config mapping, nested ones included."""
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and isinstance(node.get("options"), dict):
            yield node
        for value in node.values():
            yield from _specs(value)


def reads_boxes(cfg: ModelConfig) -> bool:
    """Whether the model of ``cfg`` reads region boxes: appended to the features (``box_input``), encoded
    (``box_encoding``), or through an attention mechanism that needs geometry (GSA, NG-SAN's, SLA with
    ``position: boxes``) at any site, the kind's options included; or a kind that always reads them (LXMERT)."""
    kind = MODELS.get(cfg.kind)
    if cfg.box_input or cfg.box_encoding != "none" or (kind is not None and kind.boxes):
        return True
    for spec in _specs(dataclasses.asdict(cfg)):
        cls = ATTENTION.get(spec["name"])
        if cls is None:  # a feed-forward or another component
            continue
        caps = cls.capabilities
        if hasattr(cls, "capabilities_for"):
            caps = cls.capabilities_for(parse_options(cls.Options, spec["options"], spec["name"]))
        if caps.needs_geometry:
            return True
    return False


def region_source(
    cfg: ModelConfig, features: Any, boxes: Any, store: str | Path | FeatureStore | None, ids: Sequence[int] | None,
) -> tuple[FeatureStore, list[int]]:
    """The store and image ids the model of ``cfg`` reads: ``store`` (a path or an opened store) and its ``ids``
    (None: all), or ``features`` as arrays (``boxes`` as fractions of the image size; ``ids``: their image ids,
    default 0 .. B-1). Exactly one of ``features`` and ``store``; boxes are required when the model reads them."""
    if (features is None) == (store is None):
        raise ConfigError("give either features (arrays) or store (a feature store, with ids), not both or neither")
    if features is not None:
        if boxes is None and reads_boxes(cfg):
            raise ConfigError("this model reads region boxes (model.box_input, box_encoding or a geometry-aware "
                              "attention): pass boxes=, x1 y1 x2 y2 as fractions of the image size")
        source: FeatureStore = MemoryStore(features, boxes, ids)
        wanted = source.ids() if ids is None else [int(i) for i in ids]
    else:
        if boxes is not None:
            raise ConfigError("boxes= goes with features=; a store holds its own boxes")
        source = open_store(store) if isinstance(store, (str, Path)) else store
        wanted = source.ids() if ids is None else [int(i) for i in ids]
        missing = [i for i in wanted if i not in source]
        if missing:
            raise DataError(f"image ids not in the feature store: {missing[:10]}", path=source.path)
    if not wanted:
        raise DataError("no images to read", path=source.path)
    check_feature_dim(cfg, source.dim)
    return source, wanted
