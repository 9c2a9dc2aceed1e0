"""Decoding chosen on validation (``eval.beam_size: auto``): the beam size, among ``eval.beam_candidates`` (1 =
greedy), whose captions of the val split score the best CIDEr-D, and its record beside the checkpoint it was chosen
for.

Small captioners trained briefly often caption better greedily than with a beam (beam search favours short,
generic captions when the model's probabilities are poorly calibrated), larger ones the other way round; which
one wins is measured, not assumed. The choice is made once after training, for the run's best checkpoint, and
written into that checkpoint's directory (``decoding.json``); a checkpoint written later (a new best) is a new
directory without one, so a recorded choice always belongs to the weights beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlattn.errors import DataError
from vlattn.io import atomic_write_text

CHOICE_FILE = "decoding.json"


@dataclass(frozen=True)
class BeamChoice:
    """The chosen ``beam_size`` and the ``metric`` of every candidate on ``images`` images of ``split``;
    ``source``: when the choice was made (``after training`` or ``at evaluation``)."""

    beam_size: int
    metric: str
    split: str
    images: int
    scores: dict[int, float]
    source: str = "after training"

    def to_dict(self) -> dict[str, Any]:
        return {"beam_size": self.beam_size, "metric": self.metric, "split": self.split, "images": self.images,
                "scores": {str(k): v for k, v in self.scores.items()}, "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BeamChoice:
        """The inverse of :meth:`to_dict`."""
        return cls(int(data["beam_size"]), str(data["metric"]), str(data["split"]), int(data["images"]),
                   {int(k): float(v) for k, v in data["scores"].items()}, str(data["source"]))

    def describe(self) -> str:
        """``beam 1 chosen on val CIDEr (beam 1 0.9562, beam 3 0.7380; after training)``."""
        scores = ", ".join(f"beam {k} {v:.4f}" for k, v in self.scores.items())
        return f"beam {self.beam_size} chosen on {self.split} {self.metric} ({scores}; {self.source})"


def choose_beam_size(score: Callable[[int], float], candidates: Sequence[int], *, metric: str, split: str,
                     images: int, source: str = "after training") -> BeamChoice:
    """The candidate with the highest ``score(beam_size)``; on a tie the smaller beam (the cheaper decoding)."""
    sizes = sorted(set(candidates))
    scores = {beam: float(score(beam)) for beam in sizes}
    best = max(sizes, key=lambda beam: (scores[beam], -beam))
    return BeamChoice(best, metric, split, images, scores, source)


def record_choice(checkpoint_dir: Path, choice: BeamChoice) -> None:
    """Write ``choice`` into the checkpoint directory it was made for (atomically)."""
    atomic_write_text(checkpoint_dir / CHOICE_FILE, json.dumps(choice.to_dict(), indent=1))


def recorded_choice(checkpoint_dir: Path) -> BeamChoice | None:
    """The choice recorded for the checkpoint in ``checkpoint_dir``, or None; a malformed record is a
    ``DataError`` naming the file."""
    path = checkpoint_dir / CHOICE_FILE
    if not path.is_file():
        return None
    try:
        return BeamChoice.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise DataError(f"malformed beam-size record ({type(err).__name__}: {err}); delete it to choose again",
                        path=path) from None
