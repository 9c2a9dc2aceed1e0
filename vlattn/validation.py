"""Load-time validation of the named components of a config (the task, the model kind and the task it serves,
what the task reads — for captioning: the model options, each attention site's mechanism, options and
placement, feed-forward — and the schedule of every stage of the task): every problem is a one-line
``ConfigError`` naming the key. Called by :func:`vlattn.config.config_from_dict`."""

from __future__ import annotations

from vlattn.config import Config, value_at
from vlattn.models import model_kind
from vlattn.tasks import task_of
from vlattn.training.schedules import check_schedule


def check_components(cfg: Config) -> None:
    """Raise a ``ConfigError`` for the first invalid component of ``cfg``."""
    task = task_of(cfg.task)
    model_kind(cfg.model.kind, cfg.task)
    task.check(cfg)
    for stage in task.stages.values():
        check_schedule(value_at(cfg, stage.schedule), stage.schedule)
