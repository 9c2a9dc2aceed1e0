"""vlattn: attention mechanisms for vision-language models behind one Q-K-V interface.

The public API (imported on first use, so ``import vlattn`` stays cheap; see :mod:`vlattn.api`):
``presets()``, ``load_config(name_or_path, overrides)``, ``create_model(preset_or_config, vocab_size=...,
**overrides)``, ``load(run_dir_or_checkpoint, device=...)`` -> ``Captioner`` / ``Answerer``, and ``ConfigError``,
``DataError``.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {
    "presets": "vlattn.api",
    "load_config": "vlattn.api",
    "create_model": "vlattn.api",
    "load": "vlattn.api",
    "Config": "vlattn.config",
    "Captioner": "vlattn.tasks.captioner",
    "Caption": "vlattn.tasks.captioner",
    "Answerer": "vlattn.tasks.answerer",
    "Answer": "vlattn.tasks.answerer",
    "ConfigError": "vlattn.errors",
    "DataError": "vlattn.errors",
    "VlattnError": "vlattn.errors",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'vlattn' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
