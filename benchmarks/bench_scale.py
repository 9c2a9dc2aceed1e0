"""COCO scale on one machine: loader throughput, memory, start-up, TSV conversion and evaluation at N images.

Generates the workload of benchmarks/scale_workload.py (COCO shapes, random values) under ``--work`` (deleted
afterwards unless ``--keep``), then measures, side by side in one run, the sections named by ``--sections``:

- ``loader``: items/s into training batches (XE: batch 50 of (image, caption) pairs; SCST: batch 50 of images
  with their references; VQA: batch 64 of questions) for each store format, the memmap store as the training loop
  reads it (``memmap``: items in the store's float16, each batch laid out by a worker in a slot of shared memory
  reused once the main process has freed the batch, :mod:`vlattn.data.handover`), the same without slots
  (``memmap-new-shm``: features written into new shared memory, the other tensors moved there when sent), the
  memmap store in float32 (``memmap-float32``: float32 items, each batch built in the worker's private memory and
  copied into new shared memory when sent), read item by item (``memmap-items``: without the batch read-ahead of
  vlattn's datasets and training loop) and the released M2 code's HDF5
  access pattern (``anchor``: the file opened per item, ``f['%d_features' % id][()]``, padded to 50 regions in
  float64, cast to float32), with 0/1/2 DataLoader workers, page cache cold (every file of the store dropped with
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` before the run) and warm (every file read once before). The rate counts
  the batches after the first (worker start-up excluded), each taken by the main process as a CUDA training loop
  takes it (its tensors copied into buffers reused from batch to batch, as ``pin_memory`` does). Stores are read
  without vlattn's region cache. Beside them, the disk's rates in the same run: sequential (8 MiB reads) and random reads of one image's float16
  features (200 KiB at COCO shapes) one at a time and 32 in flight; and each store's bytes per image.
- ``memory``: peak proportional (PSS) anonymous memory, i.e. besides the page cache, of the main process and of
  each DataLoader worker through an XE epoch (``--memory-batches`` > 0: that many batches) of the training
  pipeline as ``vlattn train`` builds it (``load_caption_data``, the region cache at ``data.region_cache_mb``),
  and the private memory each worker dirtied (copy-on-write copies plus its own allocations); and the time and
  peak memory of SCST's CIDEr-D document frequencies over the training references. Each in its own process.
- ``startup``: seconds from launching ``vlattn train`` (each of ``--startup-presets``, default ``--preset``; CPU) to
  its first training record
  (the first step included), with the caches in the data directory absent and then present; and the phases
  (reading captions, vocabulary, fingerprints, word counts, document frequencies) timed in one process.
- ``convert``: ``vlattn data convert`` of the bottom-up TSV to memmap with each ``--convert-jobs`` (and, unless
  ``--no-block-pipeline``, the block pipeline converting to the other formats runs: blocks parsed by 2 processes,
  written by the main one), MB/s of TSV read against the disk's sequential read rate measured in the same run (the
  TSV read cold with 8 MiB reads), and the peak RSS of the largest process.
- ``eval``: ``vlattn eval`` of a two-step checkpoint of ``--preset`` on the test split at each ``--beams`` size:
  images/s, and the metrics' share of the time (the predictions it wrote scored again alone).

``--sparse`` replaces the memmap store by one whose feature file is a hole (zeros read without disk I/O): the
start-up, memory and evaluation sections can then run at 123,287 images without 25 GB of features; the loader
and convert sections need real bytes and refuse it. Results as JSON on stdout (``--json FILE`` too).

    .venv/bin/python benchmarks/bench_scale.py --images 10000 --sections loader,convert --work DIR
    .venv/bin/python benchmarks/bench_scale.py --images 123287 --sparse --sections memory,startup,eval --work DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

import scale_workload as workload

SECTIONS = ("loader", "memory", "startup", "convert", "eval")
STORE_PATHS = {"memmap": "memmap", "m2-hdf5": "m2.h5", "npz-dir": "npz", "tsv": "features.tsv", "lmdb": "lmdb"}
READ_CHUNK = 8 << 20
TASKS = ("xe", "scst", "vqa")


# --- the workload ---------------------------------------------------------------------------------------------


def data_root(args: argparse.Namespace) -> Path:
    return Path(args.work) / f"coco{args.images}"


def prepare(args: argparse.Namespace, formats: list[str]) -> dict[str, float]:
    """Write the captions, VQA files and the stores of ``formats`` (what is missing); seconds per part."""
    root = data_root(args)
    (root / "stores").mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    if not (root / "dataset.json").exists():
        start = time.perf_counter()
        workload.write_captions(root / "dataset.json", args.images)
        seconds["captions"] = time.perf_counter() - start
    if not (root / "vqa").exists():
        start = time.perf_counter()
        workload.write_vqa(root / "vqa", args.images)
        seconds["vqa"] = time.perf_counter() - start
    for fmt in formats:
        path = store_path(args, fmt)
        if path.exists():
            continue
        start = time.perf_counter()
        if fmt == "memmap" and args.sparse:
            workload.sparse_memmap(path, args.images, args.regions, args.dim)
        else:
            workload.write_store(fmt, path, args.images, args.regions, args.dim)
        seconds[fmt] = time.perf_counter() - start
    return seconds


def store_path(args: argparse.Namespace, fmt: str) -> Path:
    name = "sparse" if fmt == "memmap" and args.sparse else STORE_PATHS[fmt]
    return data_root(args) / "stores" / name


def files_of(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def drop_cache(path: Path) -> None:
    """Drop the page cache of every file of ``path`` (written data is flushed first: only clean pages drop)."""
    for file in files_of(path):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(path: Path, limit: int | None = None) -> tuple[int, float]:
    """Read every file of ``path`` once in 8 MiB chunks (the first ``limit`` bytes when given): (bytes, seconds)."""
    total, start = 0, time.perf_counter()
    for file in files_of(path):
        with open(file, "rb", buffering=0) as handle:
            while (limit is None or total < limit) and (chunk := handle.read(READ_CHUNK)):
                total += len(chunk)
    return total, time.perf_counter() - start


def write_rate(path: Path, nbytes: int) -> float:
    """The disk's sequential write rate (MB/s): ``nbytes`` of random bytes written to ``path`` in 8 MiB writes and
    flushed to disk (``fdatasync``), as a converted store is before the command ends; ``path`` is then deleted."""
    block = np.random.default_rng(0).integers(0, 256, READ_CHUNK, dtype=np.uint8).tobytes()
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as handle:
        for offset in range(0, nbytes, READ_CHUNK):
            handle.write(block[: nbytes - offset])
        os.fdatasync(handle.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return round(nbytes / seconds / 2**20, 1)


# --- loader throughput ------------------------------------------------------------------------------------------


class M2ReleasedPairs(Dataset):
    """The released M2 code's data path over an M2 HDF5 file: per item the file is opened, ``<id>_features`` read
    whole, padded with float64 zeros to ``max_detections`` rows and cast to float32; captions as word ids."""

    def __init__(self, path: Path, pairs: list[tuple[int, list[int]]], max_detections: int) -> None:
        self.path, self.pairs, self.max_detections = str(path), pairs, max_detections

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[np.ndarray, list[int]]:
        image_id, tokens = self.pairs[index]
        handle = h5py.File(self.path, "r")
        features = handle["%d_features" % image_id][()]
        missing = self.max_detections - features.shape[0]
        if missing > 0:
            features = np.concatenate([features, np.zeros((missing, features.shape[1]))], axis=0)
        return features[: self.max_detections].astype(np.float32), tokens


def collate_released(batch: list[tuple[np.ndarray, list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked features (B, 50, D) and BOS/EOS-framed word ids padded to the longest (B, T)."""
    width = max(len(tokens) for _, tokens in batch) + 2
    rows = [[1, *tokens, 2] + [0] * (width - len(tokens) - 2) for _, tokens in batch]
    return torch.from_numpy(np.stack([features for features, _ in batch])), torch.tensor(rows)


def batches_of(num_items: int, batch: int, count: int, seed: int) -> list[list[int]]:
    """``count`` random batches: permutations of the items, one after another as many as needed."""
    generator = torch.Generator().manual_seed(seed)
    rounds = -(-batch * count // num_items)
    order = torch.cat([torch.randperm(num_items, generator=generator) for _ in range(rounds)])[: batch * count].tolist()
    return [order[i : i + batch] for i in range(0, len(order), batch)]


class Staging:
    """What the main process of a CUDA training loop does with each batch before the GPU takes it: its tensors
    copied into page-locked buffers that torch's pinned-memory allocator reuses from batch to batch (the DataLoader's
    ``pin_memory``); then the copy to the GPU runs asynchronously and float16 features are widened there
    (``batch_to_device``). Without CUDA: ordinary buffers, reused the same way."""

    def __init__(self) -> None:
        self.buffers: dict[Any, torch.Tensor] = {}

    def __call__(self, batch: Any) -> None:
        tensors = batch.items() if isinstance(batch, dict) else enumerate(batch)
        for key, value in tensors:
            if not torch.is_tensor(value):
                continue
            buffer = self.buffers.get(key)
            if buffer is None or buffer.dtype != value.dtype or buffer.numel() < value.numel():
                buffer = self.buffers[key] = torch.empty(value.numel(), dtype=value.dtype)
            buffer[: value.numel()].view(value.shape).copy_(value)


class CpuClock:
    """``collate`` that notes, in shared memory, the CPU time its process (a DataLoader worker, or the main process
    without workers) has used when it has collated each batch: the difference between two consecutive notes of a
    worker is the CPU it spends per batch (reading the items, collating them, handing the previous batch over),
    whatever else runs on the machine; with a core to itself it makes a batch in that time."""

    def __init__(self, collate: Callable, workers: int, batches: int) -> None:
        self.collate, self.count = collate, 0
        self.notes = torch.full((max(workers, 1), batches), float("nan"), dtype=torch.float64).share_memory_()

    def __call__(self, items: list[Any]) -> Any:
        out = self.collate(items)
        worker = get_worker_info()
        if self.count < self.notes.shape[1]:
            self.notes[0 if worker is None else worker.id, self.count] = time.process_time()
        self.count += 1
        return out

    def per_batch_ms(self) -> float | None:
        """The median CPU milliseconds per batch of the workers after their first two batches (those make their
        first slot), or None without such batches."""
        steps = [float(b - a) * 1e3 for row in self.notes.tolist() for a, b in zip(row[1:-1], row[2:])
                 if not (math.isnan(a) or math.isnan(b))]
        return statistics.median(steps) if steps else None


def rate(dataset: Dataset, collate: Callable, batch: int, workers: int, batches: int, seed: int) -> dict[str, float]:
    """Items per second through a DataLoader of random batches, timed from the first batch's arrival, each batch
    taken by the main process as a CUDA training loop takes it (:class:`Staging`); and the CPU milliseconds per
    batch of the main process over that time and of each worker (:class:`CpuClock`)."""
    from vlattn.data.regions import BatchReadahead, ReadaheadBatches

    chosen = batches_of(len(dataset), batch, batches + 1, seed)  # type: ignore[arg-type]
    # vlattn's datasets are read as the training loop reads them: the next batch hinted while this one is read
    sampler = ReadaheadBatches(chosen, dataset) if isinstance(dataset, BatchReadahead) else chosen
    clock = CpuClock(collate, workers, batches + 1)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=clock, num_workers=workers)
    items, start, cpu, stage = 0, 0.0, 0.0, Staging()
    threads = torch.get_num_threads()
    # torch on one thread, as in the DataLoader's pin-memory thread and its workers: on more, the threads of a
    # parallel copy spin after it, taking a core from the workers (and counting as CPU time)
    torch.set_num_threads(1)
    try:
        for index, out in enumerate(loader):
            stage(out)
            del out
            if index == 0:
                start, cpu = time.perf_counter(), time.process_time()
            else:
                items += len(chosen[index])
    finally:
        torch.set_num_threads(threads)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"items_per_s": items / seconds, "main_cpu_ms": cpu / batches * 1e3,
            "worker_cpu_ms": clock.per_batch_ms() if workers else None}


class ItemByItem(Dataset):
    """``dataset`` without its ``__getitems__``: the DataLoader reads a batch one item at a time, no read-ahead."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]


def _median(values: Iterable[float | None]) -> float | None:
    """The median of the values given (None for none)."""
    known = [value for value in values if value is not None]
    return round(statistics.median(known), 2) if known else None


def source_path(args: argparse.Namespace, fmt: str) -> Path:
    """The store a loader variant reads."""
    return store_path(args, {"anchor": "m2-hdf5", "memmap-items": "memmap", "memmap-new-shm": "memmap",
                             "memmap-float32": "memmap"}.get(fmt, fmt))


def disk_rates(args: argparse.Namespace, reads: int = 400, depth: int = 32) -> dict[str, float]:
    """The disk's rates on the memmap feature file, page cache dropped before each: sequential MB/s (8 MiB reads
    over at most 2 GiB) and random reads of one image's features (``reads`` at random images) one at a time and
    ``depth`` in flight (a thread per request), in MB/s and images/s."""
    from concurrent.futures import ThreadPoolExecutor

    file = store_path(args, "memmap") / "features.f16"
    item = args.regions * args.dim * 2
    drop_cache(file)
    start, total = time.perf_counter(), 0
    with open(file, "rb", buffering=0) as handle:
        while total < 2 << 30 and (chunk := handle.read(READ_CHUNK)):
            total += len(chunk)
    out = {"sequential_mb_s": round(total / (time.perf_counter() - start) / 2**20, 1)}  # (1 decimal: tiny test files)
    offsets = (np.random.default_rng(0).permutation(args.images)[:reads] * item).tolist()
    fd = os.open(file, os.O_RDONLY)
    try:
        for label, threads in (("qd1", 1), (f"qd{depth}", depth)):
            drop_cache(file)
            start = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                done = sum(len(b) for b in pool.map(lambda offset: os.pread(fd, item, offset), offsets))
            seconds = time.perf_counter() - start
            out[f"random_{label}_mb_s"] = round(done / seconds / 2**20, 1)
            out[f"random_{label}_images_s"] = round(len(offsets) / seconds, 1)
    finally:
        os.close(fd)
    return out


def hand_over_ms(args: argparse.Namespace, repeats: int = 10) -> dict[str, float]:
    """Milliseconds per XE batch (50 images x regions x dim) of what a DataLoader worker and the main process do
    with its features besides reading them (median of ``repeats``): ``float32_share``: a float32 batch built in
    private memory moved into shared memory when sent (``share_memory_()``); ``float16_shared_write``: a float16
    batch written straight into new shared memory (what vlattn's collation does in a worker without slots);
    ``float16_slot_write``: the same written into a slot of shared memory written before (with slots);
    ``slot_read_new_mapping``: the main process copying the batch out of the slot mapped anew (as torch maps a
    storage it receives when it holds no object of it: its pages are faulted in as the copy reads them), and
    ``slot_read_kept_mapping``: out of the slot still mapped (:mod:`vlattn.data.handover` keeps it);
    ``widen``: float16 -> float32 in the main process (on a GPU, done there)."""
    from vlattn.data.features.base import RegionFeatures
    from vlattn.data.handover import SlotArena
    from vlattn.data.regions import pad_regions

    single = torch.rand(50, args.regions, args.dim)
    items = [RegionFeatures(row.half().numpy(), np.zeros((args.regions, 4), np.float32), 640, 480) for row in single]
    half = single.half()
    slot = SlotArena(half.numel() * 2)
    staged = torch.empty(slot.storage.nbytes(), dtype=torch.uint8)
    fd, size = slot.storage._share_fd_cpu_()

    def slot_write() -> None:
        slot.claim()
        pad_regions(items, args.regions, shared=slot)

    def read_new_mapping() -> None:
        copy = os.dup(fd)
        try:
            mapped = torch.UntypedStorage._new_shared_fd_cpu(copy, size)
        finally:
            os.close(copy)
        staged.copy_(torch.empty(0, dtype=torch.uint8).set_(mapped))

    slot_write()  # its pages written once, as every use of a slot after its first
    steps = {"float32_share": lambda: single.clone().share_memory_(),
             "float16_shared_write": lambda: pad_regions(items, args.regions, shared=True),
             "float16_slot_write": slot_write, "slot_read_new_mapping": read_new_mapping,
             "slot_read_kept_mapping": lambda: staged.copy_(slot.flat), "widen": lambda: half.float()}
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            times.append((time.perf_counter() - start) * 1e3)
        out[name] = round(statistics.median(times), 3)
    return out


def bytes_per_image(args: argparse.Namespace, fmt: str) -> int:
    """The store's size over its images: what a cold read of one image brings in, on average."""
    return round(sum(f.stat().st_size for f in files_of(source_path(args, fmt))) / args.images)


def loader_set(args: argparse.Namespace, fmt: str, task: str) -> tuple[Dataset, Callable, int] | None:
    """``(dataset, collate, batch size)`` of ``task`` over the store of ``fmt`` (opened anew: nothing cached), or
    None when the variant has no such task (the anchor reads XE pairs only)."""
    from functools import partial

    from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
    from vlattn.data.features import open_store
    from vlattn.data.handover import SharedBatches
    from vlattn.data.karpathy import load_karpathy
    from vlattn.data.vocab import build_vocabulary
    from vlattn.data.vqa import VQADataset, build_question_vocabulary, collate_vqa, load_split
    from vlattn.data.vqa_answers import AnswerVocabulary

    root = data_root(args)
    entries = load_karpathy(root / "dataset.json")
    train = [e for e in entries if e.split == "train"]
    vocab = build_vocabulary(entries)
    if fmt == "anchor":
        pairs = [(e.image_id, vocab.encode(c, 20)) for e in train for c in e.captions]
        return (M2ReleasedPairs(store_path(args, "m2-hdf5"), pairs, 50), collate_released, 50) if task == "xe" else None
    store = open_store(source_path(args, fmt))
    stored = fmt != "memmap-float32"  # as the training loop reads items, or as it did before the float16 hand-over
    # as the training loop hands batches over (reused slots of shared memory), or without slots (before them)
    fresh = fmt in ("memmap-float32", "memmap-new-shm")

    def hand_over(collate: Callable) -> Callable:
        return collate if fresh else SharedBatches(collate)

    if task == "xe":
        found: tuple[Dataset, Callable, int] = (CaptionTrainSet(train, store, vocab, 50, 20, stored_dtype=stored),
                                                hand_over(partial(collate_train, shared=None if stored else False)), 50)
    elif task == "scst":
        found = (CaptionEvalSet(train, store, 50, stored_dtype=stored),
                 hand_over(partial(collate_eval, shared=None if stored else False)), 50)
    else:
        split = load_split("train", [root / "vqa/questions_train.json"], [root / "vqa/annotations_train.json"])
        assert split.annotations is not None
        answers = AnswerVocabulary.build((a.multiple_choice_answer for a in split.annotations.values()), top_k=3129)
        found = (VQADataset(split.questions, split.annotations, store, build_question_vocabulary(split.questions),
                            answers, 50, stored_dtype=stored), hand_over(collate_vqa), 64)
    return (ItemByItem(found[0]), *found[1:]) if fmt == "memmap-items" else found  # type: ignore[return-value]


# A100 SXM4 dense peak rates (NVIDIA A100 datasheet): FP32 19.5, TF32 tensor 156, BF16 tensor 312 TFLOPS
A100_TFLOPS = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}
# Assumed sustained rate of the XE step on an A100: half the BF16 dense peak (see md_loader)
ASSUMED_TFLOPS = A100_TFLOPS["bf16"] / 2


def a100_bound(batch: int = 50) -> dict[str, Any]:
    """The FLOPs of one XE step of the m2 preset (d=512) at batch ``batch`` (50 regions, 20 words, V=10,201),
    counted by torch's FLOP counter, and the (image, caption) pairs per second an A100 would consume at each peak
    rate: an upper bound of what the loader must supply (a real step reaches only part of the peak)."""
    from vlattn.api import create_model
    from vlattn.models.profile import flops_train_step

    model = create_model("m2", vocab_size=10_201)
    flops = flops_train_step(model, batch, 50, 20, 2048, 10_201)
    return {"m2_xe_step_gflops": round(flops / 1e9, 1),
            "pairs_per_s_at_peak": {name: round(batch * rate * 1e12 / flops) for name, rate in A100_TFLOPS.items()}}


def loader_variants(formats: list[str]) -> list[str]:
    """The stores of ``--formats``, the memmap store without slots, in float32 and item by item after it, the
    anchor last."""
    extra = ["memmap-new-shm", "memmap-float32", "memmap-items"]
    return [name for fmt in formats for name in (fmt, *(extra if fmt == "memmap" else []))] + ["anchor"]


def section_loader(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    disk = disk_rates(args) if "memmap" in args.formats else {}
    print(json.dumps(disk), file=sys.stderr, flush=True)
    for fmt in loader_variants(args.formats):
        path = source_path(args, fmt)
        for cache in args.caches:
            if cache == "warm":
                read_all(path)
            for task in args.tasks:
                for workers in args.workers:
                    found = loader_set(args, fmt, task)
                    if found is None:
                        continue
                    dataset, collate, batch = found
                    runs = []
                    for repeat in range(args.repeats):
                        if cache == "cold":
                            drop_cache(path)
                        seed = zlib.crc32(f"{cache} {task} {workers} {repeat}".encode())  # the same batches for every store
                        runs.append(rate(dataset, collate, batch, workers, args.batches, seed))
                    rows.append({"format": fmt, "cache": cache, "task": task, "workers": workers,
                                 **{key: _median(run[key] for run in runs) for key in runs[0]},
                                 "runs": [round(run["items_per_s"]) for run in runs]})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                    del found, dataset
                    gc.collect()
    sizes = {fmt: bytes_per_image(args, fmt) for fmt in loader_variants(args.formats)}
    return {"rows": rows, "disk": disk, "bytes_per_image": sizes, "hand_over_ms": hand_over_ms(args),
            "a100": a100_bound()}


# --- memory -----------------------------------------------------------------------------------------------------


def memory_of(pid: int) -> dict[str, int]:
    """Pss_Anon and Private_Dirty (kB) of ``pid`` from /proc/PID/smaps_rollup ({} once it has exited)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("Pss_Anon", "Private_Dirty", "Rss", "Pss_File"):
            values[name] = int(rest.split()[0])
    return values


class Sampler:
    """Peak memory (:func:`memory_of`) of this process and the pids ``pids()`` returns, sampled every 0.2 s."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids, self.peaks, self.first = pids, {}, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def sample(self) -> None:
        for role, pid in [("main", os.getpid()), *((f"worker{i}", p) for i, p in enumerate(self.pids()))]:
            values = memory_of(pid)
            if values:
                self.first.setdefault(role, values)
                peak = self.peaks.setdefault(role, {})
                for key, value in values.items():
                    peak[key] = max(peak.get(key, 0), value)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def child_memory_xe(args: argparse.Namespace) -> dict[str, Any]:
    """The XE training data of ``vlattn train`` through an epoch with ``args.child_workers`` workers."""
    from vlattn.config import DataConfig
    from vlattn.tasks.captioning import collate_train, load_caption_data
    from vlattn.training.loop import EpochBatchSampler

    root = data_root(args)
    start = time.perf_counter()
    data = load_caption_data(DataConfig(root=str(root), karpathy="dataset.json",
                                        features=str(store_path(args, "memmap").relative_to(root))))
    dataset = data.train_set()
    built = time.perf_counter() - start
    sampler = EpochBatchSampler(len(dataset), 50, seed=1, epoch=0)
    limit = args.memory_batches or len(sampler)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_train, num_workers=args.child_workers,
                        generator=torch.Generator().manual_seed(1))
    iterator = iter(loader)
    workers = [w.pid for w in getattr(iterator, "_workers", [])]
    count, start = 0, time.perf_counter()
    with Sampler(lambda: workers) as sampler_:
        for index, batch in enumerate(iterator):
            count += len(batch["tokens"])
            if index + 1 >= limit:
                break
        sampler_.sample()
    seconds = time.perf_counter() - start
    del iterator
    mb = {role: {k: round(v / 1024, 1) for k, v in peak.items()} for role, peak in sampler_.peaks.items()}
    growth = {role: round((sampler_.peaks[role]["Private_Dirty"] - first["Private_Dirty"]) / 1024, 1)
              for role, first in sampler_.first.items()}
    return {"workers": args.child_workers, "items": count, "pairs": len(dataset), "seconds": round(seconds, 1),
            "build_s": round(built, 2), "peak_mb": mb, "private_growth_mb": growth,
            "total_pss_anon_mb": round(sum(p["Pss_Anon"] for p in sampler_.peaks.values()) / 1024, 1)}


def child_memory_cider(args: argparse.Namespace) -> dict[str, Any]:
    """Time and memory of the CIDEr-D document frequencies of every training reference."""
    from vlattn.data.karpathy import load_karpathy
    from vlattn.metrics import CiderDocumentFrequency

    entries = [e for e in load_karpathy(data_root(args) / "dataset.json") if e.split == "train"]
    references = [[" ".join(tokens) for tokens in e.captions] for e in entries]
    with Sampler(lambda: []) as sampler_:
        before = memory_of(os.getpid())["Pss_Anon"]
        start = time.perf_counter()
        table = CiderDocumentFrequency.build(references, mode="image", eos_token="<eos>")
        built = time.perf_counter() - start
        sampler_.sample()
    cache = Path(args.work) / "cider_df.npz"
    table.save(cache)
    start = time.perf_counter()
    CiderDocumentFrequency.cached(cache, references, mode="image", eos_token="<eos>")
    loaded = time.perf_counter() - start
    cache.unlink()
    return {"references": sum(map(len, references)), "images": len(references), "build_s": round(built, 2),
            "cached_s": round(loaded, 2), "peak_extra_mb": round((sampler_.peaks["main"]["Pss_Anon"] - before) / 1024, 1)}


def in_child(args: argparse.Namespace, name: str, *extra: str) -> dict[str, Any]:
    """Run ``--child name`` of this script in a new process (clean memory figures); its JSON result."""
    command = [sys.executable, __file__, "--child", name, "--images", str(args.images), "--work", args.work,
               "--regions", str(args.regions), "--dim", str(args.dim), "--memory-batches", str(args.memory_batches),
               *(["--sparse"] if args.sparse else []), *extra]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"--child {name} failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def section_memory(args: argparse.Namespace) -> dict[str, Any]:
    xe = [in_child(args, "memory-xe", "--child-workers", str(w)) for w in args.workers]
    return {"xe": xe, "cider_df": in_child(args, "memory-cider")}


# --- start-up ---------------------------------------------------------------------------------------------------


def train_command(args: argparse.Namespace, out: Path, *extra: str, preset: str | None = None) -> list[str]:
    root = data_root(args)
    features = store_path(args, "memmap").relative_to(root)
    return [str(Path(sys.executable).with_name("vlattn")), "train", "--config", preset or args.preset,
            "--out", str(out),
            "--device", "cpu", "--set", f"data.root={root}", "--set", "data.karpathy=dataset.json",
            "--set", f"data.features={features}", "--set", "train.log_every=1", "--set", "train.max_steps=2",
            "--set", "train.val_max_images=50", "--set", f"model.feature_dim={args.dim}",
            *extra]


def first_step(args: argparse.Namespace, out: Path, preset: str | None = None) -> tuple[float, float | None]:
    """Seconds from launching ``vlattn train`` to its first ``train`` record, and to its ``prepare`` record (None
    for a model without data-dependent initialisation); the run is then stopped (SIGTERM: it saves
    ``checkpoints/last`` after its second step, before any validation) and waited for."""
    start = time.perf_counter()
    errors = out.with_name(f"{out.name}.log")
    errors.parent.mkdir(parents=True, exist_ok=True)
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(train_command(args, out, preset=preset), stdout=subprocess.DEVNULL, stderr=stderr)
        log = out / "metrics.jsonl"
        seconds = prepared = None
        while process.poll() is None:
            text = log.read_text() if log.exists() else ""
            if prepared is None and '"prepare"' in text:
                prepared = time.perf_counter() - start
            if '"train"' in text:
                seconds = time.perf_counter() - start
                process.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        process.wait()
    if seconds is None:
        raise RuntimeError(f"vlattn train ended before its first step: {errors.read_text()[-2000:]}")
    return seconds, prepared


def phases(args: argparse.Namespace) -> dict[str, float]:
    """Seconds of each start-up phase of the XE and SCST stages, in one process."""
    from vlattn.config import DataConfig
    from vlattn.tasks.captioning import load_caption_data, training_reward

    root = data_root(args)
    cfg = DataConfig(root=str(root), karpathy="dataset.json", features=str(store_path(args, "memmap").relative_to(root)))
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        out = fn()
        timings[name] = round(time.perf_counter() - start, 2)
        return out

    from vlattn.data.karpathy import load_karpathy
    from vlattn.data.karpathy_cache import cache_file, load_karpathy_cached

    timed("karpathy_parse", lambda: load_karpathy(root / "dataset.json"))
    timed("karpathy_cached", lambda: load_karpathy_cached(root / "dataset.json", cache_file(root, "dataset.json")))
    data = timed("load_caption_data", lambda: load_caption_data(cfg))
    timed("fingerprint", data.fingerprint)
    timed("train_set", data.train_set)
    timed("train_set.lengths", lambda: data.train_set().lengths())
    timed("prepare_resources", lambda: data.prepare_resources(torch.nn.Module(), 0))
    shutil.rmtree(root / "cache", ignore_errors=True)
    timed("cider_df_build", lambda: training_reward(data))
    timed("cider_df_cached", lambda: training_reward(data))
    return timings


def section_startup(args: argparse.Namespace) -> dict[str, Any]:
    runs = Path(args.work) / "runs"
    rows = []
    for preset in args.startup_presets:
        shutil.rmtree(data_root(args) / "cache", ignore_errors=True)
        row: dict[str, Any] = {"preset": preset}
        for label in ("no_cache", "cached"):
            out = runs / f"startup-{preset}-{label}"
            shutil.rmtree(out, ignore_errors=True)
            seconds, prepared = first_step(args, out, preset)
            row[f"first_step_s_{label}"] = round(seconds, 1)
            row[f"prepare_s_{label}"] = None if prepared is None else round(prepared, 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"rows": rows, "phases": in_child(args, "phases")}


# --- conversion and evaluation ------------------------------------------------------------------------------------


# Runs a command and prints its exit status and peak RSS (kB). A fresh interpreter forks the command: a child's
# ru_maxrss counts the RSS its parent had when it forked, which for this script includes mapped store files.
_PEAK_WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, "
    "stderr=open(sys.argv[1], 'w')); print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_of(command: list[str], log: Path) -> tuple[float, float]:
    """Run ``command`` (its stderr to ``log``): (seconds, peak RSS in MB)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, str(log), *command], capture_output=True, text=True,
                         check=True)
    seconds = time.perf_counter() - start
    status, peak_kb = (int(v) for v in out.stdout.split())
    if status != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed: {log.read_text()[-2000:]}")
    return seconds, peak_kb / 1024


_BLOCK_PIPELINE = ("import sys; from vlattn.data.features import TSVStore, write_memmap; "
                   "write_memmap(sys.argv[2], TSVStore(sys.argv[1]).stream(jobs=int(sys.argv[3])))")


def section_convert(args: argparse.Namespace) -> dict[str, Any]:
    """``--convert-repeats`` rounds, each running `vlattn data convert` with each of ``--convert-jobs`` in turn (the
    runs alternate: the virtual disk's rate drifts), and in the first round the block pipeline (blocks of lines
    parsed by a pool, written by the main process: what converting to the other formats runs) with 2 processes;
    each run with the page cache dropped first, right after the disk's sequential rate on the TSV (page cache
    dropped, 8 MiB reads over its first GiB). Then each ``--convert-jobs`` once more with the TSV in the page cache
    (read once before): the rate of the parsing processes alone, without the disk."""
    tsv = store_path(args, "tsv")
    out = Path(args.work) / "converted"
    vlattn = str(Path(sys.executable).with_name("vlattn"))

    def convert(source: Path, jobs: int) -> list[str]:
        return [vlattn, "data", "convert", "--from", str(source), "--to", str(out), "--format", "memmap", "--jobs",
                str(jobs)]

    runs = {f"convert --jobs {jobs}": convert(tsv, jobs) for jobs in args.convert_jobs}
    pipeline = {"block pipeline, 2 processes": [sys.executable, "-c", _BLOCK_PIPELINE, str(tsv), str(out), "2"]}
    pipeline = pipeline if args.block_pipeline else {}

    size = tsv.stat().st_size

    def timed(name: str, command: list[str], cold: bool) -> dict[str, Any]:
        drop_cache(tsv)
        # cold: the disk's rates just before (reading the first GiB, writing); warm: the whole TSV read into the page
        # cache
        read, seconds = read_all(tsv, 1 << 30 if cold else None)
        written = write_rate(Path(args.work) / "write-test", min(512 << 20, size)) if cold else None
        shutil.rmtree(out, ignore_errors=True)
        if cold:
            drop_cache(tsv)
        convert_s, rss = peak_of(command, data_root(args) / "convert.log")
        store_mb = sum(f.stat().st_size for f in files_of(out)) / 2**20
        shutil.rmtree(out)
        row = {"run": name, "cache": "cold" if cold else "warm", "disk_read_mb_s": round(read / seconds / 2**20, 1),
               "disk_write_mb_s": written, "store_mb": round(store_mb, 3),
               "convert_s": round(convert_s, 1), "convert_mb_s": round(size / convert_s / 2**20, 1),
               "net_mb_s": round(size / max(convert_s - startup, 1e-3) / 2**20, 1),
               "peak_rss_mb": round(rss)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    one = Path(args.work) / "one-image.tsv"  # the command's start-up: converting a TSV of its first line
    with open(tsv, "rb") as handle:
        one.write_bytes(handle.readline())
    starts = []
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        starts.append(peak_of(convert(one, 1), data_root(args) / "convert.log")[0])
    startup = statistics.median(starts)
    shutil.rmtree(out)
    one.unlink()
    done = []
    for repeat in range(args.convert_repeats):
        for name, command in {**runs, **(pipeline if repeat == 0 else {})}.items():
            done.append(timed(name, command, cold=True))
    done += [timed(name, command, cold=False) for name, command in runs.items()]
    rows = []
    for name in [*runs, *pipeline]:
        for cache in ("cold", "warm"):
            mine = [r for r in done if r["run"] == name and r["cache"] == cache]
            if not mine:
                continue
            shares = [r["convert_mb_s"] / r["disk_read_mb_s"] for r in mine]
            rows.append({"run": name, "cache": cache, "runs": len(mine),
                         **{key: statistics.median(r[key] for r in mine)
                            for key in ("disk_read_mb_s", "convert_s", "convert_mb_s", "net_mb_s", "peak_rss_mb")},
                         "net_shares": [round(r["net_mb_s"] / r["disk_read_mb_s"], 3) for r in mine],
                         "net_rates": [r["net_mb_s"] for r in mine],
                         "share_of_disk": round(statistics.median(shares), 3),
                         "shares": [round(v, 3) for v in shares], "rates": [r["convert_mb_s"] for r in mine],
                         "disk_rates": [r["disk_read_mb_s"] for r in mine],
                         "write_rates": [r["disk_write_mb_s"] for r in mine if r["disk_write_mb_s"] is not None]})
    return {"tsv_mb": round(size / 2**20), "store_mb": done[0]["store_mb"], "startup_s": round(startup, 2),
            "rows": rows, "runs": done}


def section_eval(args: argparse.Namespace) -> dict[str, Any]:
    from vlattn.tasks.captioning import score_predictions

    run = Path(args.work) / "runs" / "eval"
    shutil.rmtree(run, ignore_errors=True)
    first_step(args, run)
    checkpoint = run / "checkpoints" / "last"
    from vlattn.api import load

    captioner = load(checkpoint, "cpu")
    size = {"parameters": sum(p.numel() for p in captioner.model.parameters()), "vocabulary": len(captioner.vocab),
            "d_model": captioner.config.model.d_model}
    del captioner
    vlattn = str(Path(sys.executable).with_name("vlattn"))
    root = data_root(args)
    entries = {e["cocoid"]: [s["raw"] for s in e["sentences"]]
               for e in json.loads((root / "dataset.json").read_text())["images"] if e["split"] == "test"}
    rows = []
    for beam in args.beams:
        seconds, rss = peak_of([vlattn, "eval", "--checkpoint", str(checkpoint), "--beam-size", str(beam),
                                "--device", "cpu", "--json"], run.parent / f"eval-beam{beam}.log")
        predictions = {row["image_id"]: row["caption"]
                       for row in json.loads((run / "eval" / "test_predictions.json").read_text())}
        start = time.perf_counter()
        report = score_predictions(predictions, {i: entries[i] for i in predictions})
        metrics_s = time.perf_counter() - start
        rows.append({"beam": beam, "images": len(predictions), "seconds": round(seconds, 1),
                     "images_per_s": round(len(predictions) / seconds, 2), "metrics_s": round(metrics_s, 1),
                     "metrics_share": round(metrics_s / seconds, 3), "peak_rss_mb": round(rss),
                     "unavailable": sorted(report["unavailable"])})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"preset": args.preset, **size, "threads": os.environ.get("OMP_NUM_THREADS", "default"), "rows": rows}


# --- RESULTS.md sections ------------------------------------------------------------------------------------------


def md_loader(results: dict[str, Any]) -> str:
    loader = results["loader"]
    rows = {(r["format"], r["task"], r["cache"], r["workers"]): r["items_per_s"] for r in loader["rows"]}
    sizes = loader["bytes_per_image"]
    workers = sorted({key[3] for key in rows})
    caches = [c for c in ("cold", "warm") if any(key[2] == c for key in rows)]
    columns = [(cache, w) for cache in caches for w in workers]
    head = " | ".join(f"{cache} {w}w" for cache, w in columns)
    lines = [f"| store | KB/image | batches | {head} |", "|---|---|---|" + "---|" * len(columns)]

    def cell(fmt: str, task: str, cache: str, w: int) -> str:
        value = rows.get((fmt, task, cache, w))
        if value is None:
            return "-"
        return f"{value:,.0f}" + (f" ({value * sizes[fmt] / 2**20:.0f})" if cache == "cold" else "")

    for fmt, task in dict.fromkeys((key[0], key[1]) for key in rows):
        cells = " | ".join(cell(fmt, task, cache, w) for cache, w in columns)
        lines.append(f"| {fmt} | {sizes[fmt] / 1000:.0f} | {task} | {cells} |")

    def ratios(top: str, bottom: str, cache: str = "cold") -> str:
        return ", ".join(f"{w}w {rows[(top, 'xe', cache, w)] / rows[(bottom, 'xe', cache, w)]:.1f}x"
                         for w in workers if (top, "xe", cache, w) in rows and (bottom, "xe", cache, w) in rows)

    disk = loader["disk"]
    depth = next(key for key in disk if key.startswith("random_qd") and key != "random_qd1_mb_s"
                 and key.endswith("_mb_s"))
    deep = depth[len("random_"):-len("_mb_s")]
    a100 = loader["a100"]
    demand = round(50 * ASSUMED_TFLOPS * 1e12 / (a100["m2_xe_step_gflops"] * 1e9))
    fp32 = a100["pairs_per_s_at_peak"]["fp32"]
    hand = loader["hand_over_ms"]
    verdict = _one_worker(loader["rows"], caches, fp32, demand)
    pair_mb = sizes["memmap"] / 2**20
    return (f"{results['images']:,} images x {results['regions']} x {results['dim']} regions; median items/s of "
            f"{results.get('repeats', 1)} runs into batches (XE: 50 (image, caption) pairs; SCST: 50 images with "
            f"references; VQA: 64 questions) after the first batch, {'/'.join(map(str, workers))} DataLoader "
            "workers; cold: every file of the store dropped from the page cache with "
            "`posix_fadvise(POSIX_FADV_DONTNEED)` first, cells 'items/s (MB/s of store read)'; warm: every file "
            "read once first. The main process takes each batch as a CUDA training loop's does (torch on one thread, as "
            "in the DataLoader's pin-memory thread): its tensors copied into "
            "buffers reused from batch to batch (the DataLoader's `pin_memory` into torch's cached page-locked memory; "
            "the copy to the GPU and the widening of float16 features there cost it nothing more). KB/image: the "
            "store's size over its images. `memmap`: vlattn's datasets read as its "
            "training loop reads them (the byte ranges of the next batch hinted with `POSIX_FADV_WILLNEED` while "
            "this one is read; features handed over in the store's float16; each batch's tensors laid out by the "
            "worker in a slot of shared memory it fills again once the main process has freed the batch, "
            "`vlattn.data.handover`); `memmap-new-shm`: the same without slots (features written into new shared "
            "memory, every other tensor moved there when sent, a file descriptor per tensor); `memmap-float32`: "
            "float32 items, each batch built in the worker's private memory and copied into new shared memory when "
            "sent (before the float16 hand-over); "
            "`memmap-items`: `memmap` read item by item (one synchronous read at a time); "
            "`anchor`: the released M2 code's access (HDF5 file "
            "opened per item, `f['%d_features' % id][()]`, float32, padded in float64).\n\n"
            + "\n".join(lines)
            + f"\n\nDisk, same run, page cache dropped: sequential {disk['sequential_mb_s']:,.0f} MB/s (8 MiB reads); "
            f"random reads of one image's float16 features: one at a time {disk['random_qd1_mb_s']:,.0f} MB/s "
            f"({disk['random_qd1_images_s']:,.0f} images/s), {deep[2:]} in flight {disk[depth]:,.0f} MB/s "
            f"({disk[f'random_{deep}_images_s']:,.0f} images/s). XE, memmap / memmap-new-shm: cold "
            f"{ratios('memmap', 'memmap-new-shm')}; warm {ratios('memmap', 'memmap-new-shm', 'warm') or '-'}. "
            f"XE, memmap / memmap-float32: cold "
            f"{ratios('memmap', 'memmap-float32')}; warm {ratios('memmap', 'memmap-float32', 'warm') or '-'}. XE "
            f"cold, memmap / anchor: {ratios('memmap', 'anchor')}; memmap / memmap-items: "
            f"{ratios('memmap', 'memmap-items')}. Per XE batch of features, same run: a float32 batch moved into "
            f"shared memory {hand['float32_share']:.1f} ms (`share_memory_()`), a float16 batch written straight into "
            f"new shared memory {hand['float16_shared_write']:.1f} ms (at most {50e3 / hand['float16_shared_write']:,.0f} "
            f"pairs/s per worker for that write alone: new shared pages cost their page faults), into a slot written "
            f"before {hand['float16_slot_write']:.1f} ms; copied out of the slot by the main process "
            f"{hand['slot_read_new_mapping']:.1f} ms when it maps the slot anew for each batch, "
            f"{hand['slot_read_kept_mapping']:.1f} ms from the slot kept mapped (as `vlattn.data.handover` keeps it); "
            f"widened to float32 on the CPU {hand['widen']:.1f} ms (what `batch_to_device` does when training on the "
            f"CPU). {_cpu_line(loader['rows'], caches, workers)}"
            + f"\n\nA100 demand (an assumption, not a measurement): the m2 preset's XE step is "
            f"{a100['m2_xe_step_gflops']} GFLOPs at batch 50 (torch's FLOP counter); assuming it sustains "
            f"{ASSUMED_TFLOPS:.0f} TFLOPS (half the BF16 dense peak of NVIDIA's A100 datasheet, 312; the best "
            "published large-model utilisation on A100 is 52% of peak, Narayanan et al. 2021, Megatron-LM, and a "
            f"d=512 model at batch 50 reaches less) it consumes {demand:,} pairs/s, {demand * pair_mb:,.0f} MB/s of "
            f"float16 features when cold (each pair reads its image's {sizes['memmap'] / 1000:.0f} KB; the disk above "
            f"reads {disk['sequential_mb_s']:,.0f} MB/s sequentially); at the FP32 peak without tensor cores (19.5 TFLOPS) "
            f"{fp32:,}. {verdict}")


def _cpu_line(rows: list[dict[str, Any]], caches: list[str], workers: list[int]) -> str:
    """The memmap XE rows' CPU milliseconds per batch of the main process and of each worker."""
    found = {(r["cache"], r["workers"]): r for r in rows if r["format"] == "memmap" and r["task"] == "xe"}
    parts = []
    for cache in caches:
        cells = []
        for w in workers:
            row = found.get((cache, w))
            if row is not None:
                worker = f", each worker {row['worker_cpu_ms']:.1f}" if row.get("worker_cpu_ms") is not None else ""
                cells.append(f"{w}w: main process {row['main_cpu_ms']:.1f}{worker}")
        parts.append(f"{cache} " + "; ".join(cells))
    return ("CPU time per XE batch of `memmap` (ms; the main process's over the timed batches, a worker's between "
            "consecutive batches after its first two, median; CPU time, unlike the wall clock, does not count the "
            "time a process waits for a core or for the disk): " + " / ".join(parts) + ".")


def _one_worker(rows: list[dict[str, Any]], caches: list[str], fp32: float, demand: float) -> str:
    """Whether one memmap worker feeds the FP32-peak rate: by the wall clock of this run, and with a core to itself
    (its CPU time per batch)."""
    found = {r["cache"]: r for r in rows if (r["format"], r["task"], r["workers"]) == ("memmap", "xe", 1)}
    if not found:
        return "One memmap worker: not measured."

    def feeds(rate: float) -> str:
        return f"{'feeds' if rate >= fp32 else 'does not feed'} the FP32-peak rate ({rate / fp32:.0%} of it)"

    wall = "; ".join(f"{cache} {found[cache]['items_per_s']:,.0f} pairs/s: {feeds(found[cache]['items_per_s'])}, "
                     f"{found[cache]['items_per_s'] / demand:.0%} of the assumed BF16 rate"
                     for cache in caches if cache in found)
    def on_own_core(cache: str) -> str:
        ms = found[cache]["worker_cpu_ms"]
        if cache == "warm":
            return f"warm {ms:.1f} ms of CPU per batch, {50e3 / ms:,.0f} pairs/s: {feeds(50e3 / ms)}"
        return (f"cold {ms:.1f} ms of CPU per batch, at most {50e3 / ms:,.0f} pairs/s (the worker also waits for the "
                "disk: the cold wall clock above is the measurement)")

    core = "; ".join(on_own_core(cache) for cache in caches if cache in found and found[cache].get("worker_cpu_ms"))
    return (f"One memmap worker, XE, by the wall clock of this run (the worker and the main process on the machine's "
            f"cores beside whatever else ran): {wall}. With a core to itself (as on a GPU machine, where the main "
            f"process has its own), from its CPU time: {core or 'not measured'}.")


def md_memory(results: dict[str, Any]) -> str:
    lines = ["| workers | main PSS anon (MB) | each worker PSS anon (MB) | each worker dirtied (MB) | total (MB) |",
             "|---|---|---|---|---|"]
    for run in results["memory"]["xe"]:
        peaks = run["peak_mb"]
        workers = [role for role in peaks if role != "main"]
        anon = ", ".join(f"{peaks[r]['Pss_Anon']:.0f}" for r in workers) or "-"
        dirty = ", ".join(f"{run['private_growth_mb'][r]:.0f}" for r in workers) or "-"
        lines.append(f"| {run['workers']} | {peaks['main']['Pss_Anon']:.0f} | {anon} | {dirty} | "
                     f"{run['total_pss_anon_mb']:.0f} |")
    cider = results["memory"]["cider_df"]
    first = results["memory"]["xe"][0]
    return (f"{results['images']:,} images ({first['pairs']:,} training pairs), the XE data of `vlattn train` "
            f"(`load_caption_data`, default `data.region_cache_mb`), {first['items']:,} pairs of the epoch; peak "
            "proportional anonymous memory (page cache excluded) from /proc/PID/smaps_rollup every 0.2 s; "
            "'dirtied': the growth of a worker's private dirty memory after its first sample (copy-on-write copies "
            "and its own allocations).\n\n" + "\n".join(lines)
            + f"\n\nCIDEr-D document frequencies of {cider['references']:,} references ({cider['images']:,} images): "
            f"built in {cider['build_s']} s with {cider['peak_extra_mb']} MB extra at the peak; loaded from the "
            f"cache in {cider['cached_s']} s.")


def md_startup(results: dict[str, Any]) -> str:
    startup = results["startup"]
    phases = ", ".join(f"{name} {seconds} s" for name, seconds in startup["phases"].items())
    lines = ["| preset | no caches in the data directory (s) | caches present (s) | of which to the `prepare` record "
             "(s): without / with caches |", "|---|---|---|---|"]
    lines += [f"| {r['preset']} | {r['first_step_s_no_cache']} | {r['first_step_s_cached']} | "
              + (f"{r['prepare_s_no_cache']} / {r['prepare_s_cached']}" if r.get("prepare_s_no_cache") else "-")
              + " |" for r in startup["rows"]]
    return (f"`vlattn train --config PRESET` on CPU (the whole machine), {results['images']:,} images: seconds from "
            "launch to the first training record (the first step included) and to the `prepare` record (a CATT "
            "preset's k-means dictionaries: the image dictionary over 100,000 training regions, the word "
            "dictionary; over a sparse store's identical zero regions the image k-means is faster than over real "
            "features). Caches in the data directory (`<data root>/cache/`): the parsed Karpathy file with its "
            "captions' fingerprint, and a CATT preset's k-means dictionaries (keyed by what they are fitted on, the "
            "settings and the seed); the vocabulary is counted and the training captions encoded by C-level loops, "
            "not cached.\n\n" + "\n".join(lines) + f"\n\nPhases in one process: {phases}.")


def md_convert(results: dict[str, Any]) -> str:
    c = results["convert"]
    lines = ["| run | page cache | runs | disk sequential read just before (MB/s) | seconds | convert (MB/s of TSV) | "
             "share of the disk rate | without start-up (MB/s) | its share of the disk rate | peak RSS (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def each(median: float, values: list[float], form: str = "{:,.0f}") -> str:
        return form.format(median) + " (" + ", ".join(form.format(v) for v in values) + ")"

    for r in c["rows"]:
        cold = r["cache"] == "cold"
        lines.append(
            f"| {r['run']} | {r['cache']} | {r['runs']} | {each(r['disk_read_mb_s'], r['disk_rates']) if cold else '-'} "
            f"| {r['convert_s']} | {each(r['convert_mb_s'], r['rates'])} "
            f"| {each(r['share_of_disk'], r['shares'], '{:.0%}') if cold else '-'} "
            f"| {each(r['net_mb_s'], r['net_rates'])} "
            f"| {each(statistics.median(r['net_shares']), r['net_shares'], '{:.0%}') if cold else '-'} "
            f"| {r['peak_rss_mb']:.0f} |")
    return (f"`vlattn data convert` of a {c['tsv_mb']:,} MB bottom-up TSV ({results['images']:,} images x "
            f"{results['regions']} x {results['dim']}, base64 float32) to memmap (a {c['store_mb']:,.0f} MB store); medians over the runs (each run's "
            "value in brackets). Cold: the runs alternate between the settings; before each, the disk's sequential "
            "read rate on the TSV (page cache dropped, 8 MiB reads over its first GiB), then the run with the page "
            "cache dropped again. Warm: the TSV read into the page cache first (the parsing processes' rate without "
            "the disk). `convert --jobs N`: N processes each read a chunk of the file into a buffer they reuse, parse "
            "it and write its rows into the store (`--jobs 1`: in the command's process)"
            + ("; block pipeline: blocks of lines read by the main process, parsed by a pool of 2, written by the main "
               "process (what converting to the other formats runs)" if any(r["run"].startswith("block") for r in c["rows"])
               else "") + ". Seconds: the whole command, the store's files flushed to disk at its end included; "
            "without start-up: its seconds less those of "
            f"converting a one-image TSV ({c['startup_s']:.1f} s: starting Python, importing torch). Peak RSS: of the "
            "largest process.\n\n" + "\n".join(lines) + _reach(c))


def _reach(c: dict[str, Any]) -> str:
    """The goal (at least 70% of the disk's sequential read rate) per setting from the cold runs, what bounds it: the
    processes' parsing rate from the page cache (per process, and the fastest disk of which it converts 70%), and
    the disk's write rate measured alone (the store is flushed to disk before the command ends)."""
    rows = c["rows"]
    cold = [r for r in rows if r["cache"] == "cold" and r["run"].startswith("convert")]
    warm = {r["run"]: r for r in rows if r["cache"] == "warm"}
    parts = []
    if cold:
        goal = [f"{r['run']} {statistics.median(r['net_shares']):.0%} without start-up "
                f"({'met' if statistics.median(r['net_shares']) >= 0.7 else 'not met'}), {r['share_of_disk']:.0%} "
                "with it" for r in cold]
        parts.append("Goal, at least 70% of the disk's sequential read rate (medians of the cold runs): "
                     + "; ".join(goal) + ".")
    if warm:
        rates = []
        for name, r in warm.items():
            jobs = int(name.split()[-1]) if name.startswith("convert --jobs") else 2
            rates.append(f"{name} converts {r['net_mb_s']:,.0f} MB/s without start-up ({r['net_mb_s'] / jobs:,.0f} MB/s "
                         f"per process), so it reaches 70% of a disk reading up to {r['net_mb_s'] / 0.7:,.0f} MB/s")
        parts.append("From the page cache: " + "; ".join(rates) + ".")
    writes = [w for r in cold for w in r.get("write_rates", [])]
    if writes and c.get("store_mb"):
        ratio = c["store_mb"] / c["tsv_mb"]
        write = statistics.median(writes)
        read = statistics.median(d for r in cold for d in r["disk_rates"])
        parts.append(f"Writing: the store ({ratio:.0%} of the TSV's bytes) is flushed to disk before the command ends; "
                     f"512 MiB written and flushed alone before each cold run: {write:,.0f} MB/s (median; the disk's "
                     f"median read rate {read:,.0f} MB/s).")
    return "\n\n" + " ".join(parts) if parts else ""


def md_eval(results: dict[str, Any]) -> str:
    lines = ["| beam | images | seconds | images/s | metrics (s) | metrics' share | peak RSS (MB) |",
             "|---|---|---|---|---|---|---|"]
    for r in results["eval"]["rows"]:
        lines.append(f"| {r['beam']} | {r['images']:,} | {r['seconds']} | {r['images_per_s']} | {r['metrics_s']} | "
                     f"{r['metrics_share']:.0%} | {r['peak_rss_mb']} |")
    missing = sorted({name for r in results["eval"]["rows"] for name in r["unavailable"]})
    ev = results["eval"]
    return (f"`vlattn eval` (CPU, OMP_NUM_THREADS={ev['threads']}) of a two-step `{ev['preset']}` checkpoint (d={ev['d_model']}, "
            f"{ev['parameters']:,} parameters over {ev['vocabulary']:,} words) on the test split; an "
            "untrained model decodes all 20 steps. 'metrics': the written predictions scored again alone (BLEU, "
            f"METEOR, ROUGE-L, CIDEr-D{'; not available: ' + ', '.join(missing) if missing else ''}).\n\n"
            + "\n".join(lines))


SECTION_MARKDOWN: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "loader": ("Scale: loader throughput at {images:,} images", md_loader), "memory": ("Scale: memory", md_memory),
    "startup": ("Scale: start-up", md_startup), "convert": ("Scale: TSV to memmap conversion", md_convert),
    "eval": ("Scale: evaluation", md_eval)}


def _with_load(text: str, section: dict[str, Any]) -> str:
    """``text`` and the machine's 1-minute load average as the section started and ended (other jobs running beside
    it), in the last paragraph unless that is a table."""
    if "load" not in section:
        return text
    start, end, cores = section["load"]
    return (text + ("\n\n" if text.splitlines()[-1].startswith("|") else " ")
            + f"Machine load (1-minute load average, {cores} cores) as the section started and ended: {start}, {end}.")


def write_results(results: dict[str, Any], command: str) -> None:
    """Write a RESULTS.md section for each measured section, with ``command``."""
    from results import write_section

    for name, (heading, render) in SECTION_MARKDOWN.items():
        heading = heading.format(images=results["images"])
        if name in results:
            text = _with_load(render(results), results[name])
            if results["sparse"]:
                text += ("\n\nThe memmap store is sparse (`--sparse`: its feature file is a hole, read as zeros "
                         "without disk I/O).")
            write_section(heading, text + f"\n\nCommand: `{command}`")  # a paragraph a line: RESULTS.md stays short


# --- command line -------------------------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000, help="images of the workload (COCO: 123287)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--formats", default=",".join(workload.FORMATS), help="stores of the loader section")
    parser.add_argument("--workers", default="0,1,2", help="DataLoader worker counts (loader, memory)")
    parser.add_argument("--tasks", default=",".join(TASKS), help="batches of the loader section")
    parser.add_argument("--caches", default="cold,warm", help="page cache states of the loader section")
    parser.add_argument("--batches", type=int, default=30, help="timed batches per loader measurement")
    parser.add_argument("--repeats", type=int, default=3, help="loader measurements per setting (median reported)")
    parser.add_argument("--memory-batches", type=int, default=0, help="batches of the memory epoch (0: all)")
    parser.add_argument("--regions", type=int, default=50, help="regions per image")
    parser.add_argument("--dim", type=int, default=2048, help="feature size")
    parser.add_argument("--preset", default="m2", help="config of the eval section (and of start-up by default)")
    parser.add_argument("--startup-presets", default=None, help="comma-separated configs of the start-up section")
    parser.add_argument("--beams", default="3,5", help="beam sizes of the eval section")
    parser.add_argument("--convert-jobs", default="1,2", help="`vlattn data convert --jobs` of the convert section")
    parser.add_argument("--convert-repeats", type=int, default=3, help="cold rounds of the convert section")
    parser.add_argument("--no-block-pipeline", dest="block_pipeline", action="store_false",
                        help="the convert section without the block pipeline")
    parser.add_argument("--sparse", action="store_true", help="memmap store without feature bytes (see above)")
    parser.add_argument("--work", default=None, help="where the workload is written (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the workload (re-used by a later run)")
    parser.add_argument("--prepare-only", action="store_true", help="write the sections' workload, measure nothing")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--write", action="store_true", help="write the sections' tables to benchmarks/RESULTS.md")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-workers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    args.formats = [f for f in args.formats.split(",") if f]
    args.workers = [int(w) for w in args.workers.split(",")]
    args.beams = [int(b) for b in args.beams.split(",")]
    args.convert_jobs = [int(j) for j in args.convert_jobs.split(",")]
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.caches = [c for c in args.caches.split(",") if c]
    args.startup_presets = (args.startup_presets or args.preset).split(",")
    unknown = [s for s in args.sections if s not in SECTIONS] + [f for f in args.formats if f not in workload.FORMATS]
    unknown += [t for t in args.tasks if t not in TASKS] + [c for c in args.caches if c not in ("cold", "warm")]
    if unknown:
        parser.error(f"unknown section, format, task or cache: {', '.join(unknown)}")
    if args.sparse and args.child is None and {"loader", "convert"} & set(args.sections):
        parser.error("--sparse has no feature bytes: the loader and convert sections need a real store")
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    formats = set(args.formats) if "loader" in args.sections else set()
    formats |= {"memmap"} if {"memory", "startup", "eval"} & set(args.sections) else set()
    formats |= {"tsv"} if "convert" in args.sections else set()
    formats |= {"m2-hdf5"} if "loader" in args.sections else set()
    results: dict[str, Any] = {"images": args.images, "regions": args.regions, "dim": args.dim,
                               "sparse": args.sparse, "repeats": args.repeats, "split": workload.split_sizes(args.images)}
    results["generate_s"] = {k: round(v, 1) for k, v in prepare(args, sorted(formats)).items()}
    if args.prepare_only:
        return results
    sections: dict[str, Callable[[argparse.Namespace], Any]] = {
        "loader": section_loader, "memory": section_memory, "startup": section_startup, "convert": section_convert,
        "eval": section_eval}
    for name in args.sections:
        start, load = time.perf_counter(), os.getloadavg()[0]
        results[name] = sections[name](args)
        results[name]["load"] = [round(load, 2), round(os.getloadavg()[0], 2), os.cpu_count()]
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return results


CHILDREN: dict[str, Callable[[argparse.Namespace], Any]] = {
    "memory-xe": child_memory_xe, "memory-cider": child_memory_cider, "phases": phases}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.child is not None:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    made = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="vlattn-scale-")
    os.environ["XDG_CACHE_HOME"] = str(Path(args.work) / "xdg-cache")  # the TSV index cache stays in the workload
    try:
        results = run(args)
    finally:
        if not args.keep:
            shutil.rmtree(args.work if made else data_root(args), ignore_errors=True)
            shutil.rmtree(Path(args.work) / "runs", ignore_errors=True)
            shutil.rmtree(Path(args.work) / "xdg-cache", ignore_errors=True)
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    if args.write:
        write_results(results, recorded_command(sys.argv[1:]))


def recorded_command(argv: list[str]) -> str:
    """The command line for RESULTS.md: without where files went (``--work``, ``--json``, ``--keep``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--work", "--json"):
            skip = True
        elif arg != "--keep" and not arg.startswith(("--work=", "--json=")):
            kept.append(arg)
    return " ".join([".venv/bin/python", "benchmarks/bench_scale.py", *kept])


if __name__ == "__main__":
    main()
