"""Locating Java and the jars bundled with pycocoevalcap (an optional dependency)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path


def pycocoevalcap_file(*parts: str) -> Path | None:
    """Path of a file inside the installed pycocoevalcap package, or None when absent."""
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    return path if path.exists() else None


def find_jar(*parts: str) -> tuple[Path | None, str]:
    """``(jar path, "")`` when ``java`` is on PATH and the pycocoevalcap jar exists, else ``(None, reason)``."""
    if shutil.which("java") is None:
        return None, "java is not on PATH"
    jar = pycocoevalcap_file(*parts)
    if jar is None:
        return None, f"pycocoevalcap's {'/'.join(parts)} is not installed (pip install 'vlattn[coco]')"
    return jar, ""


class JarBridge:
    """Base of the Java metric bridges: the jar (or None) and why it cannot run."""

    def __init__(self, *jar_parts: str) -> None:
        self._jar, self._reason = find_jar(*jar_parts)

    def available(self) -> bool:
        """Whether the metric can run here (see :attr:`reason` when not)."""
        return self._jar is not None

    @property
    def reason(self) -> str:
        """Why the metric cannot run ("" when it can)."""
        return self._reason
