"""METEOR 1.5 through the jar bundled with pycocoevalcap, in one long-lived Java subprocess.

The protocol is the one pycocoevalcap uses (``-stdio -l en -norm``): one ``SCORE ||| refs ||| hyp`` line per
image returns its statistics, then one ``EVAL ||| stats ||| ...`` line returns every image's score and the
corpus score. When Java or the jar is missing, :meth:`Meteor.available` says why and nothing is started.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Hashable, Mapping, Sequence

from vlattn.metrics._java import JarBridge
from vlattn.metrics.ngrams import paired_captions

_JAR = ("meteor", "meteor-1.5.jar")


class Meteor(JarBridge):
    """METEOR with pycocoevalcap's ``compute_score(gts, res) -> (score, [per-image scores])``.

    The subprocess starts on first use (or early, with :meth:`start`) and is stopped by :meth:`close` (also via
    ``with`` or on deletion).
    """

    def __init__(self) -> None:
        super().__init__(*_JAR)
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def compute_score(
        self, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
    ) -> tuple[float, list[float]]:
        candidates, references = paired_captions(gts, res)
        with self._lock:
            stats = [self._ask(self._score_line(c, refs)) for c, refs in zip(candidates, references)]
            self._send("EVAL ||| " + " ||| ".join(stats))
            scores = [float(self._read()) for _ in stats]
            return float(self._read()), scores

    @staticmethod
    def _score_line(candidate: str, references: Sequence[str]) -> str:
        candidate = candidate.replace("|||", "").replace("  ", " ")
        return " ||| ".join(("SCORE", " ||| ".join(references), candidate))

    def _ask(self, line: str) -> str:
        self._send(line)
        return self._read()

    def _send(self, line: str) -> None:
        process = self.start()
        assert process.stdin is not None
        process.stdin.write(f"{line}\n".encode("utf-8"))
        process.stdin.flush()

    def _read(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the METEOR Java process exited unexpectedly")
        return line.decode("utf-8").strip()

    def start(self) -> subprocess.Popen[bytes]:
        """Start the Java process now (it spends ~20-30 s loading its paraphrase table) if not running.

        Returns at once: callers overlap that loading with other work before :meth:`compute_score`.
        """
        if self._jar is None:
            raise RuntimeError(f"METEOR unavailable: {self._reason}")
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                ["java", "-jar", "-Xmx2G", self._jar.name, "-", "-", "-stdio", "-l", "en", "-norm"],
                cwd=self._jar.parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
        return self._process

    def close(self) -> None:
        """Stop the Java process (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> "Meteor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def method(self) -> str:
        return "METEOR"


_prestarted: list[Meteor] = []  # at most one process, started by prestart() for the next evaluation


def prestart() -> None:
    """Start a METEOR process now for the next caption evaluation of this process to use (:func:`take_meteor`), so
    its Java start-up (~10 s loading the paraphrase table) overlaps other work such as a training stage. Does
    nothing when METEOR is unavailable or a started process is already waiting."""
    if not _prestarted:
        meteor = Meteor()
        if meteor.available():
            meteor.start()
            _prestarted.append(meteor)


def take_meteor() -> Meteor:
    """The process :func:`prestart` started (handed out once; the caller closes it), else a new :class:`Meteor`."""
    return _prestarted.pop() if _prestarted else Meteor()
