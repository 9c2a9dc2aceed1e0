"""Two-process training with torchrun (gloo on CPU): shards, gradient averaging, rank-0-only outputs."""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml
from safetensors.torch import load_file

from vlattn.config import config_to_dict
from vlattn.training.checkpoint import load_checkpoint
from vlattn.training.distributed import DistContext, average_gradients, init_distributed
from vlattn.training.loop import EpochBatchSampler
from vlattn.training.rundir import run_lock
from tests.slow import scaled
from tests.training.conftest import tiny_config
from tests.training.subproc import Child


def test_ranks_read_disjoint_shards_of_the_same_permutation() -> None:
    single = EpochBatchSampler(40, 4, seed=3, epoch=1).batches
    rank0 = EpochBatchSampler(40, 4, seed=3, epoch=1, ctx=DistContext(0, 2)).batches
    rank1 = EpochBatchSampler(40, 4, seed=3, epoch=1, ctx=DistContext(1, 2)).batches
    assert rank0 == single[0::2] and rank1 == single[1::2]
    assert len(rank0) == len(rank1) == 5
    # An odd number of batches is cut so every rank takes the same number of steps.
    assert len(EpochBatchSampler(44, 4, seed=3, epoch=1, ctx=DistContext(1, 2)).batches) == 5
    assert EpochBatchSampler(40, 4, seed=3, epoch=1, start=8).batches == single[2:]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _average_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        layer = torch.nn.Linear(2, 1, bias=False)
        layer.weight.grad = torch.full((1, 2), float(rank * 4 + 1))  # rank 0: 1, rank 1: 5
        average_gradients(layer, DistContext(rank, 2))
        torch.save(layer.weight.grad, f"{out}/grad{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_average_gradients_across_two_processes(tmp_path: Path) -> None:
    torch.multiprocessing.spawn(_average_worker, args=(_free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        grad = torch.load(tmp_path / f"grad{rank}.pt", weights_only=True)
        assert torch.equal(grad, torch.full((1, 2), 3.0))  # (1 + 5) / 2 on both ranks


def _exit_worker(rank: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    ctx = init_distributed(torch.device("cpu"))
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    atexit._run_exitfuncs()  # what the interpreter runs first on exit, while it is still whole
    Path(out, f"rank{rank}.json").write_text(json.dumps([ctx.rank, total.item(), dist.is_initialized()]))


def test_the_process_group_is_destroyed_on_exit_before_finalization(tmp_path: Path) -> None:
    """Left to interpreter finalization, gloo's threads can abort a finished rank (SIGABRT); the group
    init_distributed creates is destroyed by an exit handler instead."""
    torch.multiprocessing.spawn(_exit_worker, args=(_free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == [rank, 3.0, False]


RANK_SCRIPT = """
import atexit, sys
import torch
import torch.distributed as dist
from vlattn.training.distributed import end_rank, init_distributed

class Finalized:
    def __del__(self):
        print("finalized", flush=True)

kept = Finalized()  # a module global: the interpreter's finalization deletes it
if sys.argv[1] == "rank":
    init_distributed(torch.device("cpu"))
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    atexit.register(lambda: print("exit handlers ran", total.item(), flush=True))
    print("not flushed", end="")
    end_rank(3)
sys.exit(3)
"""


def test_a_rank_ends_after_its_exit_handlers_without_finalization(tmp_path: Path) -> None:
    """end_rank: the exit status given, exit handlers run, output flushed, and no interpreter finalization (where
    torch's C++ teardown can abort a finished rank); the probe for finalization is shown to work without it."""
    port = _free_port()
    ranks = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, "rank"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
             for rank in (0, 1)]
    for rank in ranks:
        out, _ = rank.communicate(timeout=120)
        assert rank.returncode == 3 and out == "not flushedexit handlers ran 2.0\n", out
    plain = subprocess.run([sys.executable, "-c", RANK_SCRIPT, "plain"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 3 and plain.stdout == "finalized\n"


@pytest.mark.parametrize(("argv", "status"), [(["--help"], 0), (["train", "--config", "no-such.yaml"], 2)])
def test_the_cli_ends_a_rank_through_end_rank_with_its_status(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                               status: int) -> None:
    import vlattn.cli
    import vlattn.training.distributed

    class Ended(Exception):
        pass

    def ended(code: int) -> None:
        raise Ended(code)

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(vlattn.training.distributed, "end_rank", ended)
    monkeypatch.setattr(sys, "argv", ["vlattn", *argv])
    with pytest.raises(Ended) as end:
        vlattn.cli.main()
    assert end.value.args == (status,)


@pytest.mark.slow
def test_torchrun_two_processes(tiny_data: Path, tmp_path: Path) -> None:
    epochs = scaled(4)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, f"train.epochs={epochs}"))))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}",
           "-m", "vlattn.cli", "train", "--config", str(config), "--out", str(run), "--device", "cpu"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # 72 pairs / batch 8 = 9 global batches -> 8 usable, 4 per rank and epoch; only rank 0 logs.
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, 4 * epochs + 1))
    assert sum(r["kind"] == "val" for r in records) == epochs
    assert (run / "checkpoints" / "best" / "model.safetensors").is_file()


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}", *args]


def worker_exit_codes(stderr: str) -> list[str]:
    """The exit codes torchrun reports for its failed workers: a worker's own, or -15 for one that torchrun ended
    (SIGTERM) because another had exited first."""
    return re.findall(r"exitcode  : (-?\d+)", stderr)


@pytest.mark.slow
def test_torchrun_ranks_share_the_lock_outcome(tiny_data: Path, tmp_path: Path) -> None:
    """Rank 0 takes the run's lock; when it cannot, every rank exits 2 with its message (none waits forever)."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, "train.epochs=1"))))
    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run):
        result = subprocess.run(torchrun("-m", "vlattn.cli", "train", "--config", str(config), "--out", str(run),
                                         "--device", "cpu"), capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    message = f"{run}: run directory is in use by process {os.getpid()} (another vlattn train)"
    codes = worker_exit_codes(result.stderr)
    assert result.returncode != 0 and "2" in codes and set(codes) <= {"2", "-15"}, result.stderr[-3000:]
    assert len(lines) >= 2 - codes.count("-15") and all(message in line for line in lines), result.stderr[-3000:]
    # torchrun itself then reports the failed workers (its own traceback); the workers print no traceback
    assert "[rank" not in result.stderr


@pytest.mark.slow
def test_torchrun_a_signal_to_one_rank_stops_all_at_the_same_step(tiny_data: Path, tmp_path: Path) -> None:
    """SIGTERM to rank 1 only: the ranks agree, rank 0 saves at the step boundary, every rank says so and exits
    143 (or is ended by torchrun, SIGTERM, once the first of them has exited), and the run resumed under torchrun
    ends with the weights of an uninterrupted one."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, "train.epochs=2"))))
    straight, run = tmp_path / "straight", tmp_path / "run"
    train = ["--threads", "1", "train", "--config", str(config), "--device", "cpu", "--out"]
    done = subprocess.run(torchrun("-m", "vlattn.cli", *train, str(straight)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    child = Child(tmp_path, "signal:3", *train, str(run), launcher=torchrun("-m")[1:], rank=1)
    os.kill(child.wait_ready(), signal.SIGTERM)
    _, err = child.finish()
    stopped = [line for line in err.splitlines() if line.startswith("vlattn: stopped by SIGTERM at step 3 (epoch 1)")]
    codes = worker_exit_codes(err)
    assert "143" in codes and set(codes) <= {"143", "-15"} and len(stopped) >= 2 - codes.count("-15"), err[-3000:]
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 3

    resumed = subprocess.run(torchrun("-m", "vlattn.cli", "--threads", "1", "train", "--out", str(run), "--resume",
                                      "--device", "cpu"), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for name in ("last", "best"):
        ours, theirs = (load_file(str(r / "checkpoints" / name / "model.safetensors")) for r in (run, straight))
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), name
