"""Configs checked against the registries: what the command line, the demos and the importers read.

:mod:`vlattn.config` checks what a config says by itself (keys, types, choices, ranges); a config read here is also
checked for the components it names (:func:`vlattn.tasks.check_components`: the task, the model kind and the task it
serves, every attention site's mechanism, options and placement, feed-forward, the schedule of each stage), every
problem a one-line ``ConfigError`` naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlattn.config import Config, config_from_dict, load_config
from vlattn.errors import ConfigError
from vlattn.tasks import check_components


def valid_config(data: dict[str, Any]) -> Config:
    """:func:`vlattn.config.config_from_dict` with the components checked."""
    cfg = config_from_dict(data)
    check_components(cfg)
    return cfg


def load_valid_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """:func:`vlattn.config.load_config` (the file ``path``, None: the defaults, with ``overrides``) with the
    components checked; an error names the file."""
    cfg = load_config(path, overrides)
    try:
        check_components(cfg)
    except ConfigError as err:
        raise ConfigError(f"{path or 'config'}: {err}") from None
    return cfg
