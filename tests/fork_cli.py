"""Run many ``vlattn`` command lines, each in its own forked child process, paying for the imports once.

    python -m tests.fork_cli CASES.json

``CASES.json``: a list of ``{"args": [...], "limit": bytes or null, "out": file, "err": file}``. Each case runs
``vlattn ARGS`` in a child forked from this process (after vlattn, torch and the writers are imported) with its
standard output and error (through pipes) saved in ``out``/``err`` and, when ``limit`` is given, a file-size limit (``RLIMIT_FSIZE``).
Prints the list of exit statuses (negative: killed by that signal) as JSON.
"""

from __future__ import annotations

import json
import os
import resource
import select
import sys


def _drain(fds: dict[int, bytearray]) -> None:
    """Read the pipes ``fds`` until each is closed."""
    open_fds = set(fds)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [])
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                fds[fd] += chunk
            else:
                open_fds.discard(fd)
                os.close(fd)


def run_case(case: dict) -> int:
    """Run one case; its output goes through pipes (files would fall under the case's own size limit)."""
    from vlattn.cli import main

    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(out_r)
            os.close(err_r)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            if case["limit"] is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (case["limit"], resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            sys.argv = ["vlattn", *case["args"]]
            try:
                main()
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    captured = {out_r: bytearray(), err_r: bytearray()}
    _drain(captured)
    _, status = os.waitpid(pid, 0)
    with open(case["out"], "wb") as out, open(case["err"], "wb") as err:
        out.write(captured[out_r])
        err.write(captured[err_r])
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    import h5py  # noqa: F401 - imported once for every child
    import torch  # noqa: F401

    import vlattn.cli  # noqa: F401
    import vlattn.data.synth  # noqa: F401
    import vlattn.scoring.captions  # noqa: F401
    import vlattn.tasks.captioning  # noqa: F401

    with open(sys.argv[1]) as handle:
        cases = json.load(handle)
    print(json.dumps([run_case(case) for case in cases]))


if __name__ == "__main__":
    main()
