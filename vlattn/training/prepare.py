"""Data-dependent initialisation: the ``prepare`` hook (CATT's global dictionaries, initialised by
k-means over the training set: CATT paper Sec. 3.2, after Eq. 7).

A module that needs data to initialise itself defines::

    def prepare(self, resources: PrepareResources) -> str | None:
        centroids = kmeans(resources.regions.sample(100_000, resources.generator), ...)
        self.dictionary.copy_(centroids)

The stage runner (:func:`vlattn.training.stage.run_stage`) calls :func:`prepare_model` once, before the first
epoch of a *fresh* run: after the model is built from the seed and before it is moved to its device and
shared with the other ranks. It is never re-run: a resumed run and a run started from ``--init`` weights
load weights that already hold its result. Hence the rules for a hook:

- write the result into parameters or persistent buffers (so it is saved in every checkpoint and broadcast
  to the other ranks; the hook runs on the main process only), under ``torch.no_grad()`` (the caller's);
- optionally return a short note for the run log (what was done, e.g. how many words had a vector);
- draw randomness only from ``resources.generator``: it is seeded from the run's seed and the module's
  name, so the result is deterministic for a seed and independent of other modules. The global RNG is
  restored afterwards, so the training that follows is the same whether or not a module prepared itself.

An offline alternative (CATT's ``vlattn catt dictionary`` command) draws from the same
:class:`~vlattn.data.regions.RegionSampler` ahead of training and writes a file a hook then loads.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

import torch
from torch import nn

from vlattn.data.resources import PrepareResources


def module_seed(seed: int, name: str) -> int:
    """A seed for the module at ``name`` (its ``named_modules`` path), stable across runs and processes."""
    return (seed * 1_000_003 + zlib.crc32(name.encode("utf-8"))) % 2**63


def preparable(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` (itself included, as ``""``) that define a ``prepare`` hook."""
    return [(name, module) for name, module in model.named_modules() if callable(getattr(module, "prepare", None))]


def prepare_model(model: nn.Module, resources: Callable[[], PrepareResources]) -> list[str]:
    """Run every ``prepare`` hook of ``model`` in ``named_modules`` order; returns the names of the prepared
    modules, each followed by the note its hook returned, if any (``"question (word vectors for 40 of 46
    words from glove.txt)"``). ``resources`` is only called (e.g. the data read) when some module has a hook."""
    hooks = preparable(model)
    if not hooks:
        return []
    shared = resources()
    prepared = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for name, module in hooks:
            generator = torch.Generator().manual_seed(module_seed(shared.seed, name))
            note = module.prepare(dataclasses.replace(shared, generator=generator))
            prepared.append(f"{name} ({note})" if note else name)
    return prepared
