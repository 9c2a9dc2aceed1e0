"""``vlattn features extract``: image files -> a feature store, resumable, failures named.

Image ids come from the file names (:func:`.images.image_id_of`). The store is written as every vlattn store is:
into a temporary file or directory that replaces the destination only when complete. Resuming: when the
destination already is a store vlattn wrote with the same extractor (name, weights' SHA-256 and settings), its
images are kept and only the others are extracted; a store of another extractor or layout is refused. Ctrl-C stops
at the end of the current batch and writes what is done (run the command again to continue); a second Ctrl-C
abandons the run, leaving the destination as it was.

An image that cannot be read is named on stderr and counted, and the run goes on; ``strict`` makes the first one
an error instead (nothing written).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tqdm import tqdm

from vlattn.data.features import FORMATS, detect_layout, open_store
from vlattn.data.features.base import FeatureStore, RegionFeatures
from vlattn.data.features.record import store_extractor
from vlattn.errors import DataError
from vlattn.pixels.images import ImageFailure, LoadedImage, load_image
from vlattn.pixels.registry import Extractor

Item = tuple[int, RegionFeatures]


@dataclass
class ExtractReport:
    """What a run did: images now in the store, newly extracted, already there, failed (file, reason)."""

    store: str
    images: int = 0
    extracted: int = 0
    kept: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False

    def summary(self) -> str:
        """One line for the terminal."""
        line = (f"{self.store}: {self.images} images ({self.extracted} extracted, {self.kept} already there, "
                f"{len(self.failed)} failed)")
        return line + ("; interrupted: run the command again to continue" if self.interrupted else "")


def _same_extractor(old: dict, new: dict) -> bool:
    """Records of one extractor: name, weights' hash and settings agree (paths and library versions may differ)."""
    return (old.get("name"), old.get("weights", {}).get("sha256"), old.get("settings")) == (
        new["name"], new["weights"]["sha256"], json.loads(json.dumps(new["settings"])))


def existing_store(out: Path, format: str, record: dict) -> FeatureStore | None:
    """The store at ``out`` to resume from (None when there is none); another extractor's or layout is refused."""
    if not out.exists() and not out.is_symlink():
        return None
    layout = detect_layout(out)
    if layout != format:
        raise DataError(f"holds a {layout} store, not {format}: choose another --out or --format", path=out)
    found = store_extractor(out)
    if found is None or not _same_extractor(found, record):
        what = "no extractor record" if found is None else f"features of another extractor ({found.get('name')!r}, " \
            f"weights {str(found.get('weights', {}).get('sha256'))[:12]}..., settings {found.get('settings')})"
        raise DataError(f"holds {what}; resuming needs the same extractor, weights and settings: choose another "
                        "--out", path=out)
    return open_store(out)


def _kept_items(store: FeatureStore) -> Iterator[Item]:
    for image_id in store.ids():
        regions = store.get(image_id)
        detections = getattr(store, "detections", None)
        found = detections(image_id) if detections is not None else None
        yield image_id, regions if found is None else dataclasses.replace(regions, classes=found[0], scores=found[1])


def _attempt(path: Path, max_side: int) -> LoadedImage | ImageFailure:
    """The image in ``path``, or why it cannot be read."""
    try:
        return load_image(path, max_side=max_side)
    except ImageFailure as failure:
        return failure


def _decoded(files: Sequence[tuple[int, Path]], max_side: int, workers: int,
             ) -> Iterator[tuple[int, Path, LoadedImage | ImageFailure]]:
    """Each file decoded, in order; with ``workers`` > 0 that many threads decode ahead (at most ``2 * workers``
    images in flight, so memory stays bounded)."""
    if workers <= 0:
        for image_id, path in files:
            yield image_id, path, _attempt(path, max_side)
        return
    with ThreadPoolExecutor(workers) as pool:
        window: collections.deque[tuple[int, Path, Future]] = collections.deque()
        for k, (image_id, path) in enumerate(files):
            window.append((image_id, path, pool.submit(_attempt, path, max_side)))
            while window and (len(window) >= 2 * workers or k == len(files) - 1):
                first_id, first_path, future = window.popleft()
                yield first_id, first_path, future.result()


def _batches(decoded: Iterator[tuple[int, Path, LoadedImage | ImageFailure]], batch: int, report: ExtractReport,
             strict: bool, warn: Callable[[str], None]) -> Iterator[list[tuple[int, LoadedImage]]]:
    """Groups of ``batch`` decoded images; failures reported (or raised with ``strict``) and left out."""
    group: list[tuple[int, LoadedImage]] = []
    for image_id, path, result in decoded:
        if isinstance(result, ImageFailure):
            if strict:
                raise DataError(f"{result.reason} (--strict: nothing written)", path=path)
            report.failed.append((str(path), result.reason))
            warn(f"skipped {path}: {result.reason}")
            continue
        group.append((image_id, result))
        if len(group) == batch:
            yield group
            group = []
    if group:
        yield group


def extract_images(
    files: Sequence[tuple[int, Path]],
    out: str | Path,
    extractor: Extractor,
    *,
    format: str = "memmap",
    batch: int = 8,
    workers: int = 2,
    strict: bool = False,
    progress: bool = False,
) -> ExtractReport:
    """Extract ``files`` (``(image id, path)``, e.g. from :func:`.images.list_images`) into the store ``out``."""
    if format not in FORMATS:
        raise DataError(f"unknown feature format {format!r}; valid formats: {', '.join(FORMATS)}", path=out)
    if batch < 1 or workers < 0:
        raise DataError(f"--batch must be >= 1 and --workers >= 0, got {batch} and {workers}", path=out)
    out = Path(out)
    record = extractor.record()
    old = existing_store(out, format, record)
    have = set(old.ids()) if old is not None else set()
    todo = [(image_id, path) for image_id, path in files if image_id not in have]
    report = ExtractReport(str(out), kept=len(have))
    if old is not None and not todo:
        report.images = len(have)
        return report
    bar = tqdm(total=len(todo), desc=f"extracting ({extractor.name})", unit="img", disable=not progress,
               dynamic_ncols=True)

    def new_items() -> Iterator[Item]:
        try:
            for group in _batches(_decoded(todo, extractor.max_side, workers), batch, report, strict, _warn):
                for (image_id, _), regions in zip(group, extractor([image for _, image in group])):
                    yield image_id, regions
                report.extracted += len(group)
                bar.update(report.extracted + len(report.failed) - bar.n)
        except KeyboardInterrupt:
            report.interrupted = True  # keep what is done: the writer finishes the store with it

    def items() -> Iterator[Item]:
        if old is not None:
            yield from _kept_items(old)
        yield from new_items()

    with bar:
        written = FORMATS[format](out, items(), overwrite=old is not None, extractor=record, **_dim(format, extractor))
    report.images = written
    return report


def _warn(line: str) -> None:
    """A line on stderr that does not break the progress bar."""
    tqdm.write(line, file=sys.stderr)


def _dim(format: str, extractor: Extractor) -> dict[str, int]:
    """The writer's ``dim`` argument where it takes one (a store of no readable image still has a dimension)."""
    return {"dim": extractor.dim} if format == "memmap" else {}
