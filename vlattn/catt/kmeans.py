"""k-means for CATT's global dictionaries (CATT Sec. 3.2 after Eq. 7: "we initialize this dictionary by using
K-means over all the samples' embeddings in training set"; supplementary Sec. 9: 1000 centres over all RoI features
for BUTD+CATT, 500 image and 500 word entries for Transformer+CATT), with scikit-learn's ``MiniBatchKMeans``
(k-means++ seeding, mini-batch updates; the optional extra ``catt``).

Scale: the ~4M regions of COCO's training images are 32 GB of 2048-d float32, more than memory. :func:`stream_kmeans`
fits on the first ``buffer_rows`` regions of a seeded stream (``n_init`` k-means++ seedings, mini-batch epochs until
the centres stop moving) and then refines the centres with one mini-batch step per further chunk (``partial_fit``),
so memory is bounded by the buffer and the time grows linearly with the regions.
When the stream ends inside the buffer (every synthetic set), this is plain in-memory
mini-batch k-means. :func:`weighted_kmeans` clusters a small weighted point set (word embeddings weighted by their
occurrences in the training text) with full Lloyd k-means (``KMeans``): a vocabulary is a few thousand points.

Everything is deterministic for a seed and a thread count.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from vlattn.errors import ConfigError, DataError

BATCH_SIZE = 4096  # rows per mini-batch step of the in-memory fit
MAX_EPOCHS = 100  # passes over the buffer at most (the fit stops earlier once the centres settle)
N_INIT = 3  # k-means++ seedings tried, the best kept


def sklearn_cluster() -> ModuleType:
    """``sklearn.cluster``, or a one-line error saying how to install it."""
    try:
        from sklearn import cluster
    except ImportError:
        raise ConfigError(
            "k-means dictionaries need scikit-learn: pip install 'vlattn[catt]' (or set the dictionary's "
            "init: random / file)"
        ) from None
    return cluster


@dataclass(frozen=True)
class KMeansResult:
    """``centres`` (k, D) float32; ``rows`` points seen, ``buffered`` of them in the in-memory fit."""

    centres: np.ndarray
    rows: int
    buffered: int


def _threads(threads: int):
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    return threadpool_limits(limits=threads)


def _model(k: int, seed: int, batch_size: int, **kwargs):
    return sklearn_cluster().MiniBatchKMeans(
        n_clusters=k, random_state=seed, batch_size=batch_size, n_init=N_INIT, max_iter=MAX_EPOCHS, **kwargs
    )


def stream_kmeans(
    chunks: Iterable[np.ndarray], k: int, seed: int, *, buffer_rows: int, threads: int = 1,
    batch_size: int = BATCH_SIZE,
) -> KMeansResult:
    """k centres of the rows of ``chunks`` ((n_i, D) arrays): an in-memory fit on the first ``buffer_rows`` rows
    (at least ``3 k``), then one ``partial_fit`` step per further chunk. ``DataError`` if fewer than ``k`` rows."""
    stream = iter(chunks)
    buffered, rows = [], 0
    for chunk in stream:
        buffered.append(np.asarray(chunk, dtype=np.float32))
        rows += len(chunk)
        if rows >= max(buffer_rows, 3 * k):
            break
    if rows < k:
        raise DataError(f"k-means needs at least {k} points for {k} dictionary entries, got {rows}")
    data = np.concatenate(buffered)
    with _threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's notes on its own default n_init/threads
        model = _model(k, seed, min(batch_size, len(data))).fit(data)
        seen = len(data)
        for chunk in stream:
            model.partial_fit(np.asarray(chunk, dtype=np.float32))
            seen += len(chunk)
    return KMeansResult(model.cluster_centers_.astype(np.float32), seen, len(data))


def weighted_kmeans(points: np.ndarray, weights: np.ndarray, k: int, seed: int, *, threads: int = 1) -> np.ndarray:
    """k centres (k, D) float32 of ``points`` (n, D), each counted ``weights`` (n,) times.

    With no more distinct points than ``k`` the exact answer is every point itself (zero inertia); the spare
    centres repeat points drawn in proportion to their weights (seeded), as every optimal solution does.
    """
    points = np.asarray(points, dtype=np.float32)
    weights = np.asarray(weights, dtype=np.float64)
    keep = weights > 0
    points, weights = points[keep], weights[keep]
    distinct = np.unique(points, axis=0)
    if len(distinct) == 0:
        raise DataError("k-means over word embeddings: no word occurs in the training text")
    if len(distinct) <= k:
        rng = np.random.default_rng(seed)
        spare = rng.choice(len(points), size=k - len(distinct), p=weights / weights.sum())
        return np.concatenate([distinct, points[spare]]).astype(np.float32)
    with _threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sklearn_cluster().KMeans(n_clusters=k, random_state=seed, n_init=N_INIT)
        model.fit(points, sample_weight=weights)
    return model.cluster_centers_.astype(np.float32)
