"""CATT's global dictionaries (CATT Sec. 3.2, after Eq. 7): the keys K_C = values V_C of cross-sample attention,
"compressed from the whole training dataset since it is impossible to attend to all the samples", learned end to
end. An image dictionary lives in the space of the region features, a word dictionary in that of the word
embeddings.

Initialisation (``DictionaryOptions.init``):

- ``kmeans`` (the paper, Sec. 3.2 and supplementary Sec. 9; the default): in the model's ``prepare`` hook (a fresh
  run only), k-means centres over the training region features (``sample`` regions of whole training images drawn
  in a seeded order) or over the word embeddings weighted by their counts in the training captions
  (:mod:`vlattn.catt.kmeans`, scikit-learn). From :data:`CACHE_MIN_IMAGES` training images (image) or
  :data:`CACHE_MIN_WORDS` words (word) on, the k-means is cached in the data root's ``cache/``
  (:mod:`vlattn.data.prepare_cache`), keyed by what it is fitted on (the store's content and the images; the
  embeddings and counts), the settings and the seeded draw: a second run of the same configuration and seed reads
  it instead of fitting again (another seed fits its own);
- ``random``: U(0, 0.01), what the authors' released code does (it forces its k-means flag off and draws
  ``torch.rand(...) / 100``); Table 6's "w/o Init" ablation;
- ``file``: the entries of a dictionary file written by ``vlattn catt dictionary`` (``path``, relative to the data
  root), e.g. k-means over all ~4M COCO regions computed once ahead of training.

A word dictionary larger than the vocabulary (the synthetic set: 79 words, 500 entries) cannot be a compression of
anything: k-means then returns every word's embedding once plus spare copies drawn in proportion to the words'
training counts, so frequent words fill the dictionary and cross-sample attention leans towards them by frequency
alone. In a fresh captioner those embeddings are still the random initial ones. ``cap: vocabulary`` (word
dictionaries of the captioners and MCAN+CATT) sizes the dictionary at min(``size``, V) rows for a vocabulary of V
words; when V <= ``size`` its ``kmeans`` entries are the word embedding table itself, each word once (the unique
optimum k-means would reach at K = V), with no frequency weighting. The default ``none`` keeps the paper's
fixed size.

Every dictionary starts as the U(0, 0.01) draw when it is built, so a model has defined weights before (and
without) ``prepare``; the entries are exempt from weight decay.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from vlattn.catt.files import read_dictionary, resolve_dictionary_path
from vlattn.catt.kmeans import stream_kmeans, weighted_kmeans
from vlattn.config import MAX_SAMPLE, MAX_WIDTH, bounded
from vlattn.data.cache_dir import CACHE_DIR
from vlattn.data.features.identity import store_identity
from vlattn.data.prepare_cache import cached, entry_path
from vlattn.data.resources import PrepareResources
from vlattn.errors import ConfigError, DataError

Source = Literal["image", "word"]
RANDOM_SCALE = 0.01  # U(0, 0.01): the released code's torch.rand(...) / 100
BUFFER_BYTES = 512 * 2**20  # regions held in memory for the k-means fit; further regions refine it in a stream
CHUNK_ROWS = 8192  # regions per streamed k-means step
# From this many training images on, an image dictionary's k-means is cached in the data root (its ``cache/``,
# vlattn.data.prepare_cache): at COCO size it takes minutes, below this seconds, and a small data directory (the
# synthetic set) stays as it was generated.
CACHE_MIN_IMAGES = 10_000
CACHE_MIN_WORDS = 5_000  # a word dictionary's k-means likewise, from this many words in the training text


@dataclass
class DictionaryOptions:
    """One global dictionary: ``size`` entries K (Table 6: 100, 200, 500; BUTD+CATT: 1000); ``init`` one of
    ``kmeans``, ``random``, ``file`` (see the module docstring); ``path`` the dictionary file of ``init: file``
    (relative paths start at the data root); ``sample`` the training regions drawn for an image dictionary's
    k-means (all of them when the training set has fewer); ``cap``: ``vocabulary`` limits a word dictionary to the
    vocabulary's size (see the module docstring)."""

    size: int = bounded(500, ge=1, le=MAX_WIDTH)
    init: Literal["kmeans", "random", "file"] = "kmeans"
    path: str = ""
    sample: int = bounded(100_000, ge=1, le=MAX_SAMPLE)
    cap: Literal["none", "vocabulary"] = "none"

    def check(self, where: str) -> None:
        if self.init == "file" and not self.path:
            raise ConfigError(f"config key {where}.path: init 'file' needs the path of a dictionary file")


@dataclass(frozen=True)
class FittedEntries:
    """k-means ``entries`` (K, D) float32 and how they were made (``meta``, written into dictionary files)."""

    entries: np.ndarray
    meta: dict[str, Any]


def _draw_seed(generator: torch.Generator) -> int:
    """The k-means seed, the first draw of a dictionary's ``prepare``."""
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))


def fit_entries(source: Source, size: int, dim: int, resources: PrepareResources, *, sample: int,
                threads: int = 1) -> FittedEntries:
    """k-means centres for a ``source`` dictionary of ``size`` entries of ``dim`` features from the training data
    in ``resources`` (randomness from ``resources.generator`` only), read from the data root's cache at COCO size
    (:data:`CACHE_MIN_IMAGES`, :data:`CACHE_MIN_WORDS`). ``ConfigError`` when the data has no such source or
    another width."""
    label = f"the {source} dictionary ({size} x {dim})"
    generator = resources.generator
    if source == "image":
        regions = resources.regions
        if regions is None:
            raise ConfigError(f"{label}: k-means needs training region features, which this task does not offer")
        if regions.dim != dim:
            raise ConfigError(f"{label}: k-means runs over the {regions.dim}-d training regions, not {dim}-d entries; "
                              "use init: random or a dictionary file of that width")
        buffer_rows = BUFFER_BYTES // (4 * dim)

        def fit_regions() -> tuple[np.ndarray, dict[str, Any]]:
            seed = _draw_seed(generator)
            result = stream_kmeans(regions.stream(sample, generator, CHUNK_ROWS), size, seed, buffer_rows=buffer_rows,
                                   threads=threads)
            return result.centres, {"source": source, "size": size, "dim": dim, "seed": seed, "rows": result.rows,
                                    "buffered": result.buffered}

        large = len(regions.image_ids) >= CACHE_MIN_IMAGES
        return _fit(resources, large, lambda: [sample, CHUNK_ROWS, buffer_rows, store_identity(regions.store),
                                               regions.image_ids, regions.max_regions], fit_regions, source, size, threads)
    embeddings, counts = resources.word_embeddings, resources.word_counts
    if embeddings is None or counts is None:
        raise ConfigError(f"{label}: k-means needs the word embeddings and word counts, which this task does not offer")
    if embeddings.shape[1] != dim:
        raise ConfigError(f"{label}: the word embeddings are {embeddings.shape[1]}-d")
    points, weights = embeddings.float().numpy(), counts.numpy()

    def fit_words() -> tuple[np.ndarray, dict[str, Any]]:
        seed = _draw_seed(generator)
        return weighted_kmeans(points, weights, size, seed, threads=threads), {
            "source": source, "size": size, "dim": dim, "seed": seed, "words": int((weights > 0).sum()),
            "tokens": int(weights.sum())}

    large = int((weights > 0).sum()) >= CACHE_MIN_WORDS
    return _fit(resources, large, lambda: [_sha256(points), _sha256(weights)], fit_words, source, size, threads)


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _fit(resources: PrepareResources, large: bool, inputs: Callable[[], list[Any]],
         fit: Callable[[], tuple[np.ndarray, dict[str, Any]]], source: Source, size: int,
         threads: int) -> FittedEntries:
    """``fit()``, through the data root's cache when the data is ``large``: keyed by ``inputs()`` (what the fit
    reads), the source, size, threads, scikit-learn's version and the generator's state before the fit."""
    if resources.data_root is None or not large:
        return FittedEntries(*fit())
    key = [source, size, threads, version("scikit-learn"), *inputs(), _sha256(resources.generator.get_state().numpy())]
    path, digest = entry_path(Path(resources.data_root) / CACHE_DIR, "catt-kmeans", key)
    return FittedEntries(*cached(path, digest, resources.generator, fit))


class GlobalDictionary(nn.Module):
    """``size`` x ``dim`` entries; ``forward()`` -> (K, dim). ``source`` (``image``/``word``) is the data that
    k-means runs over. The last ``zero_channels`` of the ``dim`` channels are not learned and stay zero: an image
    dictionary at a site whose keys are the regions with ``model.box_input``'s box channels appended (Up-Down's
    top-down site) has entries of the raw feature width, which come from no place in the image."""

    no_weight_decay: ClassVar[tuple[str, ...]] = ("entries",)

    def __init__(self, dim: int, source: Source, options: DictionaryOptions | None = None,
                 zero_channels: int = 0, *, vocabulary_size: int | None = None, where: str = "dictionary") -> None:
        """``vocabulary_size``: V of the word embedding table a word dictionary's k-means runs over (given by the
        models that own one; ``cap: vocabulary`` needs it); ``where``: the config key errors name."""
        super().__init__()
        if not 0 <= zero_channels < dim:
            raise ValueError(f"zero_channels must lie in [0, {dim}), got {zero_channels}")
        self.options = options or DictionaryOptions()
        self.source = source
        self.zero_channels = zero_channels
        size = self.options.size
        if self.options.cap == "vocabulary":
            if source != "word" or vocabulary_size is None:
                raise ConfigError(f"config key {where}.cap: 'vocabulary' applies to a model's word dictionary "
                                  "(model.options.word_dictionary of kinds catt and mcan_catt)")
            size = min(size, vocabulary_size)
        self.whole_vocabulary = self.options.cap == "vocabulary" and size == vocabulary_size
        self.entries = nn.Parameter(torch.rand(size, dim - zero_channels) * RANDOM_SCALE)  # (K, D - z)

    def extra_repr(self) -> str:
        zeros = f", zero_channels={self.zero_channels}" if self.zero_channels else ""
        return (f"{self.source}, size={self.entries.shape[0]}, dim={self.entries.shape[1]}{zeros}, "
                f"init={self.options.init!r}")

    def forward(self) -> Tensor:
        """The entries (K, D), the last ``zero_channels`` of them zero: built on the parameter while autograd
        records, on a detached alias of it (no copy) when it does not (``torch.no_grad``/``inference_mode``:
        decoding, answering, profiling).

        Every user reshapes the entries into a batch of one (``[None]``) or of one-word sequences before handing
        them to a layer. A view of a parameter made with recording off still reports ``requires_grad=True`` but
        has neither a ``grad_fn`` nor a gradient accumulator, and layers that hook their inputs' gradients reject
        such a tensor (torch's ``ModuleTracker`` under ``FlopCounterMode``: "Expected gradient function to be
        set", which broke ``vlattn profile`` on every CATT model). Detached, the view is the constant that
        no-grad mode means."""
        entries = self.entries if torch.is_grad_enabled() else self.entries.detach()
        return F.pad(entries, (0, self.zero_channels)) if self.zero_channels else entries

    def prepare(self, resources: PrepareResources) -> None:
        """Initialise the entries from the data (``kmeans``) or a dictionary file (``file``); ``random`` keeps the
        U(0, 0.01) draw."""
        options = self.options
        if options.init == "random":
            return
        if options.init == "file":
            path = resolve_dictionary_path(options.path, resources.data_root)
            entries = read_dictionary(path).entries
            if entries.shape != tuple(self.entries.shape):
                raise DataError(f"the {self.source} dictionary needs {tuple(self.entries.shape)} entries, the file "
                                f"holds {entries.shape}", path=path)
        elif self.whole_vocabulary:
            entries = vocabulary_entries(resources, tuple(self.entries.shape))
        else:
            entries = fit_entries(self.source, self.entries.shape[0], self.entries.shape[1], resources,
                                  sample=options.sample, threads=torch.get_num_threads()).entries
        self.entries.copy_(torch.from_numpy(entries))


def vocabulary_entries(resources: PrepareResources, shape: tuple[int, int]) -> np.ndarray:
    """The word embedding table (V, d) as a dictionary of one entry per word (``cap: vocabulary`` at V <= size)."""
    embeddings = resources.word_embeddings
    if embeddings is None or tuple(embeddings.shape) != shape:
        found = None if embeddings is None else tuple(embeddings.shape)
        raise ConfigError(f"the word dictionary ({shape[0]} x {shape[1]}, cap: vocabulary) needs a word embedding "
                          f"table of that shape; the task offers {found}")
    return embeddings.detach().float().numpy().copy()
