"""Random caption corpora for comparisons with pycocoevalcap."""

from __future__ import annotations

import pytest
from metrics.corpora import random_corpus


@pytest.fixture(params=range(12))
def corpus(request: pytest.FixtureRequest) -> tuple[dict, dict]:
    seed = request.param
    return random_corpus(seed, images=[1, 2, 3, 10, 40, 100][seed % 6], vocab=[5, 30, 300][seed % 3])
