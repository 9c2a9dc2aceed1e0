"""Config fuzzing: random mutations of every preset, fed through the function the CLI loads configs with
(:func:`vlattn.validation.load_valid_config`, as a file and as ``--set`` overrides), must give a config or a one-line
:class:`~vlattn.errors.VlattnError`: never another exception (a traceback at the command line) and never a case
that runs past its time limit (a hang).

``make test`` runs ``VLATTN_CONFIG_FUZZ`` cases (default 300, seeded); set it higher for a longer search, e.g.
``VLATTN_CONFIG_FUZZ=10000``. A few mutated configs also go through a real ``vlattn`` process.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from vlattn import shipped_presets
from vlattn.errors import VlattnError
from vlattn.validation import load_valid_config

CASES = int(os.environ.get("VLATTN_CONFIG_FUZZ", "300"))
SEED = 27
TIME_LIMIT = 20.0  # seconds per case: the slowest valid preset loads in well under a second

NUMBERS: list[Any] = [0, -1, 1, 3, 2**31, 2**53 + 1, 2**63, 2**64, 10**9, 10**18, -(10**12), 1e308, 1e-300, 0.5,
                      -0.0, math.nan, math.inf, -math.inf, 65536, 65537, 1000, 64, 65]
ODD: list[Any] = ["", "\u00e9t\u00e9 \u4e2d\u6587 \U0001f600", "\u202e\u0000", None, True, False, [], {}, "1e9", "nan",
                  ".inf", "null", "~", "[", "{x: 1}", "a" * 10_000, [1, [2, [3]]], {"a": {"b": {"c": 1}}}, "0x10",
                  "1_000", "!!python/object:os.system", "*anchor", "%YAML 9"]
KEYS = ["zzz", "\u00fcnknown", "1", "options", "name", "__class__", "", " ", "model", "kind"]


def leaves(data: dict, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every ``(path, value)`` of a nested mapping, mappings included."""
    for key, value in data.items():
        yield (*prefix, key), value
        if isinstance(value, dict):
            yield from leaves(value, (*prefix, key))


def nested(depth: int, kind: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def new_value(rng: random.Random, old: Any) -> Any:
    """A hostile replacement for ``old``."""
    roll = rng.random()
    if roll < 0.4:
        if isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.6:
            return rng.choice([old * 10 ** rng.randint(1, 15), -old, old + 1, 2 ** rng.randint(8, 70), old - 1])
        return rng.choice(NUMBERS)
    if roll < 0.7:
        return rng.choice(ODD)
    if roll < 0.8:
        return nested(rng.choice([5, 31, 33, 200]), rng.choice(["list", "dict"]))
    return rng.choice([[old], {"x": old}, str(old), [old, old], {"name": old}, {"options": old}])


def mutate(rng: random.Random, data: dict) -> tuple[dict, list[str]]:
    """1-3 mutations of a preset's data: values replaced (leaves or whole sections), keys added or removed.
    Returns the mutated data and one ``--set`` override per mutation that re-creates it from the preset."""
    data, overrides = copy.deepcopy(data), []
    for _ in range(rng.randint(1, 3)):
        path, old = rng.choice(list(leaves(data)))
        roll = rng.random()
        if roll < 0.15:
            path = (*path[:-1], rng.choice(KEYS))
        value = new_value(rng, old)
        node = data
        for key in path[:-1]:
            node = node[key]
        if roll > 0.95 and path[-1] in node:
            del node[path[-1]]
            continue
        node[path[-1]] = value
        overrides.append(".".join(map(str, path)) + "=" + json.dumps(value, allow_nan=True))
    return data, overrides


def damaged_text(rng: random.Random, text: str) -> str:
    """A preset's text cut, spliced with hostile characters, or deeply nested."""
    cut = rng.randrange(len(text))
    roll = rng.random()
    if roll < 0.3:
        return text[:cut]
    if roll < 0.6:
        return text[:cut] + rng.choice(["\t", ":", "- ", "{", "[", "&a ", "*a", "!!", "\ud800", "\x00", "? "]) + text[cut:]
    if roll < 0.8:
        depth = rng.choice([40, 1000, 20_000])
        return text + f"\nextra: {'[' * depth}{']' * depth}\n"
    return "a: &a [*a]\n" if roll < 0.85 else "x: " + "{y: " * 5000 + "1" + "}" * 5000


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:  # pytest-timeout's own alarm for the whole test, set again with what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def run_case(path: Path, overrides: list[str]) -> str:
    """``ok``, ``error`` (a one-line VlattnError naming the file or override), ``traceback: ...`` or ``hang``."""
    try:
        with time_limit(TIME_LIMIT):
            load_valid_config(path, overrides)
        return "ok"
    except Hang:
        return "hang"
    except VlattnError as err:
        message = str(err)
        if str(path) not in message and not message.startswith("override "):
            return f"traceback: an error naming neither the file nor the override: {message[:200]}"
        return "error"
    except Exception as err:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        return f"traceback: {type(err).__name__}: {str(err)[:200]}"


def cases(count: int, seed: int) -> Iterator[tuple[str, str, list[str]]]:
    """``(preset name, file text, overrides)`` of ``count`` seeded cases."""
    rng = random.Random(seed)
    texts = {name: shipped_presets.text(name) for name in shipped_presets.names()}
    for _ in range(count):
        name = rng.choice(sorted(texts))
        roll = rng.random()
        if roll < 0.15:
            yield name, damaged_text(rng, texts[name]), []
            continue
        try:
            data, overrides = mutate(rng, yaml.safe_load(texts[name]))
            text = yaml.safe_dump(data, allow_unicode=True)
        except (ValueError, RecursionError, yaml.YAMLError):  # a mutation wrapped a mapping into itself
            continue
        if roll < 0.6:  # the mutated preset as a file
            yield name, text, []
        else:  # the preset as it is, mutated by --set overrides
            yield name, texts[name], overrides


def test_config_fuzzer_gives_no_traceback_and_no_hang(tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    failures = []
    for i, (name, text, overrides) in enumerate(cases(CASES, SEED)):
        path = tmp_path / f"case{i}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        outcome = run_case(path, overrides)
        outcomes[outcome.split(":")[0]] += 1
        if outcome not in ("ok", "error"):
            failures.append(f"{name} {overrides}: {outcome}")
        path.unlink()
    print(f"config fuzzer: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert not failures, "\n".join(failures[:20])
    assert outcomes["error"] > CASES // 4 and outcomes["ok"] > 0  # the mutations do reach the checks


@pytest.mark.parametrize("index", range(4))
def test_config_fuzzer_through_the_command(tmp_path: Path, index: int) -> None:
    """Mutated presets given to a real ``vlattn train`` (its data root missing): exit status 2, one line."""
    name, text, overrides = list(cases(40, SEED + 1))[index * 10]
    path = tmp_path / "case.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    sets = [arg for item in overrides for arg in ("--set", item)]
    result = subprocess.run(
        [sys.executable, "-m", "vlattn.cli", "--threads", "1", "train", "--config", str(path), "--out",
         str(tmp_path / "run"), "--device", "cpu", "--set", f"data.root={tmp_path / 'nodata'}", *sets],
        capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
