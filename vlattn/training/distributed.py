"""Multi-process training helpers (torchrun / DDP environment variables).

Launch with ``torchrun --nproc_per_node=G [--nnodes=M ...] -m vlattn.cli train ...``. Each rank
reads a disjoint shard of every epoch's permutation (same seed on all ranks), gradients are averaged
with one all-reduce over a flattened buffer after ``backward`` (this works for every objective,
including SCST whose forward goes through ``encode``/``step`` rather than ``__call__``), and only
rank 0 writes checkpoints, logs and predictions.
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass
from typing import Callable, NoReturn, TypeVar

import torch
import torch.distributed as dist

from vlattn.errors import ConfigError, VlattnError

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """Rank information of this process; ``world_size == 1`` for ordinary single-process runs."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> DistContext:
    """Initialise the process group when launched by torchrun, else return a single-process context."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        atexit.register(_destroy_process_group)
    return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _destroy_process_group() -> None:
    """Tear the process group down while the interpreter is still whole (an exit handler: :func:`end_rank` runs it
    too), rather than leave gloo's threads to interpreter finalization. It stays alive until exit (not destroyed
    when a stage ends) so that several stages run in one process share it."""
    if dist.is_initialized():
        dist.destroy_process_group()


def end_rank(status: int) -> NoReturn:
    """End this rank of a distributed run with exit ``status``: the exit handlers run first (the process group is
    destroyed, logs are flushed), then the process ends without the interpreter's finalization. There, torch's C++
    objects are torn down in an order that now and then aborts a rank whose work is done (``terminate called without
    an active exception``, SIGABRT: about one resumed 2-rank run in 40 here, with the group already destroyed), and
    torchrun then fails the whole run."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def pick_device(name: str = "auto", ctx: DistContext | None = None) -> torch.device:
    """``auto`` -> the local GPU when present (``cuda:LOCAL_RANK``), else CPU; a named device must exist here
    (a :class:`~vlattn.errors.ConfigError` otherwise)."""
    if name != "auto":
        return _check_device(name)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0")) if ctx is None else ctx.local_rank
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _check_device(name: str) -> torch.device:
    """``torch.device(name)`` if this machine has it (cpu, cuda, cuda:N, mps)."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name!r} is not a device; use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ConfigError(f"--device {name}: CUDA is not available ({why}); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"--device {name}: only {torch.cuda.device_count()} CUDA devices (cuda:0..)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name}: MPS is not available on this machine; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {name}: unsupported device type {device.type!r}; use cpu, cuda, cuda:N or auto")
    return device


def average_gradients(model: torch.nn.Module, ctx: DistContext) -> None:
    """All-reduce and average the gradients of ``model`` across ranks (no-op for one process)."""
    if ctx.world_size <= 1:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= ctx.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_parameters(model: torch.nn.Module, ctx: DistContext) -> None:
    """Make every rank start from rank 0's weights."""
    if ctx.world_size <= 1:
        return
    for tensor in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(tensor.data, src=0)


def max_over_ranks(value: int, ctx: DistContext, device: torch.device) -> int:
    """The largest ``value`` of all ranks (``value`` itself for one process)."""
    if ctx.world_size <= 1:
        return value
    flat = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    return int(flat.item())


def on_main(ctx: DistContext, compute: Callable[[], T]) -> T:
    """``compute()`` run by rank 0 only, its result shared with every rank. If it fails, every rank fails: rank 0
    with its error, the others with a :class:`~vlattn.errors.VlattnError` repeating its message (so no rank waits
    for a rank that is gone)."""
    if ctx.world_size <= 1:
        return compute()
    payload: list[object] = [None]
    failure: Exception | None = None
    if ctx.is_main:
        try:
            payload = [("ok", compute())]
        except Exception as err:  # noqa: BLE001 - re-raised below, after the other ranks are told
            failure, payload = err, [("failed", " ".join(str(err).splitlines()))]
    dist.broadcast_object_list(payload, src=0)
    dist.barrier()  # every rank has the payload before rank 0 may raise and exit
    status, value = payload[0]  # type: ignore[misc]
    if failure is not None:
        raise failure
    if status == "failed":
        raise VlattnError(f"rank 0: {value}")
    return value  # type: ignore[return-value]


def broadcast_int(value: int, ctx: DistContext, device: torch.device) -> int:
    """Rank 0's ``value`` on every rank (decisions only rank 0 can take, e.g. after its validation)."""
    if ctx.world_size <= 1:
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor.item())
