"""SPICE through the jar bundled with pycocoevalcap, only when everything it needs is already present.

SPICE needs Java, ``spice-1.0.jar`` and the Stanford CoreNLP 3.6.0 jar and models in its ``lib/`` folder.
pycocoevalcap downloads the CoreNLP files at first use; this bridge never downloads anything: when a file is
missing, :meth:`Spice.available` is False and :attr:`Spice.reason` names it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Hashable, Mapping, Sequence

import numpy as np

from vlattn.metrics._java import JarBridge
from vlattn.metrics.ngrams import paired_captions

_JAR = ("spice", "spice-1.0.jar")
_CORENLP = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")


def _float(value: object) -> float:
    """SPICE reports missing values as null/NaN strings; they become NaN."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


class Spice(JarBridge):
    """SPICE with pycocoevalcap's ``compute_score(gts, res) -> (mean F, [per-image score dicts])``."""

    def __init__(self) -> None:
        super().__init__(*_JAR)
        if self._jar is not None:
            missing = [name for name in _CORENLP if not (self._jar.parent / "lib" / name).exists()]
            if missing:
                self._jar = None
                self._reason = (f"Stanford CoreNLP models for SPICE are not installed ({', '.join(missing)} "
                                f"missing in pycocoevalcap/spice/lib; downloads are not attempted)")

    def compute_score(
        self, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
    ) -> tuple[float, list[dict[str, dict[str, float]]]]:
        if self._jar is None:
            raise RuntimeError(f"SPICE unavailable: {self._reason}")
        candidates, references = paired_captions(gts, res)
        ids = list(gts)
        rows = [{"image_id": i, "test": c, "refs": list(r)} for i, c, r in zip(range(len(ids)), candidates, references)]
        with tempfile.TemporaryDirectory(prefix="vlattn-spice-") as tmp:
            in_file, out_file = Path(tmp) / "in.json", Path(tmp) / "out.json"
            in_file.write_text(json.dumps(rows))
            subprocess.run(
                ["java", "-jar", "-Xmx8G", self._jar.name, str(in_file), "-out", str(out_file), "-subset", "-silent"],
                cwd=self._jar.parent, check=True, stdout=subprocess.DEVNULL,
            )
            results = {item["image_id"]: item["scores"] for item in json.loads(out_file.read_text())}
        scores = [{cat: {k: _float(v) for k, v in vals.items()} for cat, vals in results[i].items()} for i in range(len(ids))]
        return float(np.mean([s["All"]["f"] for s in scores])), scores

    def method(self) -> str:
        return "SPICE"
