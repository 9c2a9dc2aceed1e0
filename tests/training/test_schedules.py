"""Learning-rate schedules against the papers' formulas, evaluated by hand."""

from __future__ import annotations

import math

import pytest
import torch

from vlattn.config import Spec
from vlattn.errors import ConfigError
from vlattn.training.schedules import Constant, Noam, StepDecay, build_schedule


def test_noam_matches_formula_and_peaks_at_warmup() -> None:
    sched = Noam(d_model=512, warmup=10000)
    # step s (1-based) = 1: 512^-0.5 * 1 * 10000^-1.5
    assert sched.lr_at(0, 0) == pytest.approx(512**-0.5 * 1e-6)
    # at s = warmup both branches are equal: 512^-0.5 * 10000^-0.5 = 4.419e-4
    assert sched.lr_at(9999, 0) == pytest.approx(1 / math.sqrt(512) / 100)
    assert sched.lr_at(9999, 0) > sched.lr_at(9998, 0)
    assert sched.lr_at(9999, 0) > sched.lr_at(10000, 0)
    # after warm-up: s^-0.5 branch, s = 40000 -> 512^-0.5 / 200
    assert sched.lr_at(39999, 5) == pytest.approx(1 / math.sqrt(512) / 200)


def test_ngsan_step_decay_by_epoch() -> None:
    sched = StepDecay()
    # epochs t = 1..12 (0-based epoch argument t - 1): min(t*1e-4, 3e-4), halved every 3 epochs after 6
    expected = [1e-4, 2e-4, 3e-4, 3e-4, 3e-4, 3e-4, 1.5e-4, 1.5e-4, 1.5e-4, 0.75e-4, 0.75e-4, 0.75e-4, 0.375e-4]
    got = [sched.lr_at(step=123, epoch=t - 1) for t in range(1, 14)]
    assert got == pytest.approx(expected)


def test_build_schedule_by_name_and_error() -> None:
    assert isinstance(build_schedule(Spec("constant", {"lr": 5e-6}), d_model=512), Constant)
    assert build_schedule(Spec("constant", {"lr": 5e-6}), d_model=512).lr_at(10, 3) == 5e-6
    noam = build_schedule(Spec("noam", {"warmup": 4000, "scale": 2.0}), d_model=512)
    assert noam.lr_at(3999, 0) == pytest.approx(2 * 512**-0.5 * 4000**-0.5)
    # an explicit d_model (the M2 code's 512 whatever the width) wins over the model's
    fixed = build_schedule(Spec("noam", {"warmup": 4000, "d_model": 512}), d_model=128)
    assert fixed.lr_at(3999, 0) == pytest.approx(512**-0.5 * 4000**-0.5)
    with pytest.raises(ConfigError, match=r"train.schedule.name: unknown schedule 'cosine'; valid names: constant, noam, step"):
        build_schedule(Spec("cosine"), d_model=512)
    with pytest.raises(ConfigError, match=r"train.schedule.options.lr; valid keys: base_lr, decay_every"):
        build_schedule(Spec("step", {"lr": 1.0}), d_model=512)
    with pytest.raises(ConfigError, match=r"train.schedule.options.decay_factor: must be <= 1.0, got 2.0"):
        build_schedule(Spec("step", {"decay_factor": 2.0}), d_model=512)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # as the released loop does
def test_noam_epoch_offset_follows_the_released_lambda_lr_loop() -> None:
    """The released train.py: LambdaLR(lambda s: d^-0.5 * min((s+1)^-0.5, (s+1) * warmup^-1.5)), stepped at the
    start of every epoch and after every iteration; the rate of each iteration is read from the optimiser."""
    warmup, per_epoch = 7, 5
    released = lambda s: 512**-0.5 * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5)  # noqa: E731
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, released)
    expected = []
    for _ in range(3):
        scheduler.step()  # train_xe() begins with it
        for _ in range(per_epoch):
            expected.append(optimizer.param_groups[0]["lr"])
            scheduler.step()
    schedule = Noam(d_model=512, warmup=warmup, epoch_offset=True)
    ours = [schedule.lr_at(step, step // per_epoch) for step in range(3 * per_epoch)]
    assert ours == pytest.approx(expected, rel=1e-12)
    plain = Noam(d_model=512, warmup=warmup)
    assert plain.lr_at(per_epoch, 1) != pytest.approx(expected[per_epoch])
