"""The pictures need the optional ``viz`` extra (matplotlib), which ``make test`` installs with the test extra."""

import pytest

pytest.importorskip("matplotlib")
