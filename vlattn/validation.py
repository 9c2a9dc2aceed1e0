"""Load-time validation of the named components of a config (the task, the model kind and the task it serves,
what the task reads — for captioning: the model options, each attention site's mechanism, options and
placement, feed-forward — and the schedule of every stage of the task), and of the keys it sets: a key set to
another value than its default, or given explicitly (by an override or a shipped preset), that neither the model
kind, nor the task, nor any stage of the task reads is refused. Every problem is a one-line ``ConfigError`` naming the key(s). Called by
:func:`vlattn.config.config_from_dict`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from vlattn.config import Config, value_at
from vlattn.errors import ConfigError
from vlattn.models import model_kind
from vlattn.tasks import task_of
from vlattn.training.schedules import check_schedule

SECTIONS = ("model", "data", "train", "eval")


def check_components(cfg: Config, named: Iterable[str] = ()) -> None:
    """Raise a ``ConfigError`` for the first invalid component of ``cfg``, or for the keys it sets (differing from
    their defaults, or ``named``: given explicitly) that nothing reads."""
    task = task_of(cfg.task)
    kind = model_kind(cfg.model.kind, cfg.task)
    read = {"task"} | {f"model.{key}" for key in kind.reads} | task.reads
    for stage in task.stages.values():
        read |= stage.reads()
    unread = [key for key in dict.fromkeys([*set_keys(cfg), *sorted(named)]) if key not in read]
    if unread:
        model_keys = [key for key in unread if key.startswith("model.")]
        other = [key for key in unread if not key.startswith("model.")]
        readers = ([f"model kind {cfg.model.kind!r}"] if model_keys else []) + \
                  ([f"task {cfg.task!r} (stages: {', '.join(task.stages)})"] if other else [])
        raise ConfigError(f"config keys never read by {' or '.join(readers)}: {', '.join(unread)} (remove them)")
    task.check(cfg)
    for stage in task.stages.values():
        check_schedule(value_at(cfg, stage.schedule), stage.schedule)


def _default(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def set_keys(cfg: Config) -> list[str]:
    """The dotted keys of ``cfg``'s sections whose values differ from the defaults, in section order."""
    keys = []
    for section in SECTIONS:
        values = getattr(cfg, section)
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(values) if getattr(values, f.name) != _default(f)]
    return keys
