"""The shipped presets: YAML configs installed with the package as data (``vlattn/presets/NAME.yaml``; the folder
is not a Python package, ``vlattn.presets`` is the public function listing them).

A preset is addressed by its name wherever a config file is accepted (``vlattn train --config m2``,
``vlattn.load_config("m2")``). Each file carries a one-line ``description`` and may build on another preset with
``base: NAME`` (:func:`vlattn.config.load_config` resolves the chain); neither key is part of the resolved config.
"""

from __future__ import annotations

from importlib import resources
from pathlib import PurePath

import yaml

SUFFIX = ".yaml"


def _files() -> dict[str, resources.abc.Traversable]:
    root = resources.files("vlattn").joinpath("presets")
    return {entry.name[: -len(SUFFIX)]: entry for entry in root.iterdir() if entry.name.endswith(SUFFIX)}


def names() -> list[str]:
    """The names of the shipped presets, sorted."""
    return sorted(_files())


def is_name(ref: str | PurePath) -> bool:
    """Whether ``ref`` names a preset rather than a file: no directory part and no suffix (``m2``, not
    ``m2.yaml`` or ``./m2``)."""
    text = str(ref)
    return "/" not in text and "\\" not in text and not PurePath(text).suffix and text not in ("", ".", "..")


def text(name: str) -> str | None:
    """The YAML text of preset ``name``, or None if no preset has that name."""
    entry = _files().get(name)
    return entry.read_text(encoding="utf-8") if entry is not None else None


def describe() -> dict[str, str]:
    """Preset name -> its one-line ``description``."""
    return {name: str((yaml.safe_load(text(name) or "") or {}).get("description", "")) for name in names()}
