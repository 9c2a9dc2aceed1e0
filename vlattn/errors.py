"""Project-wide exception types.

Every error caused by bad user input (a file, an id, a caption, a config key) is raised as a
:class:`VlattnError` subclass whose message names the file and the item, so the CLI can print one
clear line instead of a traceback from deep inside torch or h5py.
"""

from __future__ import annotations


class VlattnError(Exception):
    """Base class for errors about user input that the CLI reports as one line."""


class DataError(VlattnError):
    """Bad or missing data: a file, an image id, a feature array, a caption, an answer."""

    def __init__(self, message: str, *, path: object | None = None, item: object | None = None) -> None:
        parts = []
        if path is not None:
            parts.append(f"{path}")
        if item is not None:
            parts.append(f"item {item!r}")
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = path
        self.item = item


class ConfigError(VlattnError):
    """A config file or override that does not match the config dataclasses."""
