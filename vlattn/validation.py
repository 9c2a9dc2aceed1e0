"""Load-time validation of the named components of a config (model kind and its options, each attention
site's mechanism, options and placement, feed-forward, schedules): every problem is a one-line
``ConfigError`` naming the key. Called by :func:`vlattn.config.config_from_dict`."""

from __future__ import annotations

from vlattn.config import Config
from vlattn.models import check_model_config
from vlattn.training.schedules import check_schedule


def check_components(cfg: Config) -> None:
    """Raise a ``ConfigError`` for the first invalid component of ``cfg``."""
    check_model_config(cfg.model)
    check_schedule(cfg.train.schedule, "train.schedule")
    check_schedule(cfg.train.scst_schedule, "train.scst_schedule")
