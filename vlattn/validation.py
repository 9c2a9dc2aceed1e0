"""Configs checked against the registries: what the command line, the demos, the Python API and the importers read.

:mod:`vlattn.config` checks what a config says by itself (keys, types, choices, ranges); a config read here is also
checked for the components it names and the keys it sets (:func:`vlattn.tasks.check_components`: the task, the model
kind and the task it serves, every attention site's mechanism, options and placement, feed-forward, the schedule of
each stage, and no key set that neither the model kind, the task nor a stage reads), every problem a one-line
``ConfigError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vlattn.config import Config, config_from_dict, config_origin, load_named_config
from vlattn.errors import ConfigError
from vlattn.tasks import check_components


def valid_config(data: dict[str, Any], named: Iterable[str] = ()) -> Config:
    """:func:`vlattn.config.config_from_dict` with the components checked; ``named``: keys given explicitly
    (``section.key``), refused too when nothing reads them even at their default values."""
    cfg = config_from_dict(data)
    check_components(cfg, named)
    return cfg


def load_valid_config(ref: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """:func:`vlattn.config.load_config` (a preset name or a file; None: the defaults, with ``overrides``) with the
    components checked; an error names the preset or file."""
    cfg, named = load_named_config(ref, overrides)
    try:
        check_components(cfg, named)
    except ConfigError as err:
        raise ConfigError(f"{config_origin(ref)}: {err}") from None
    return cfg
