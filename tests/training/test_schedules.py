"""Learning-rate schedules against the papers' formulas, evaluated by hand, and the sqrt(k) scaling of LW-Transformer."""

from __future__ import annotations

import math

import pytest
import torch

from vlattn.config import ModelConfig, Spec
from vlattn.errors import ConfigError
from vlattn.models import build_captioner
from vlattn.training.schedules import Constant, Noam, Scaled, StepDecay, WarmupMultiStep, build_schedule, lr_scale


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


def test_lw_warmup_multistep_matches_the_released_schedule() -> None:
    """LW-Transformer Sec. IV-C with the released code's epoch function: epoch s (1-based) gets base * s / 4 for
    s <= 3, base for s <= 10, base * 0.2 for s <= 12, base * 0.04 after."""
    def released(s: int) -> float:
        return s / 4 if s <= 3 else 1.0 if s <= 10 else 0.2 if s <= 12 else 0.04

    sched = build_schedule(Spec("warmup_multistep", {"base_lr": 2e-4}), d_model=512)
    assert isinstance(sched, WarmupMultiStep)
    assert [sched.lr_at(step=7, epoch=s - 1) for s in range(1, 16)] == pytest.approx([2e-4 * released(s) for s in range(1, 16)])
    none = WarmupMultiStep(warmup_epochs=0, decay_epochs=[])
    assert none.lr_at(0, 0) == none.lr_at(999, 40) == 1e-4


def lw_model(groups: dict[str, int]) -> torch.nn.Module:
    """A tiny captioner with G-MHA/G-FFN of the given group counts per component."""
    specs = {site: Spec("gmha", {"groups": k}) if site != "feed_forward" else Spec("gffn", {"groups": k})
             for site, k in groups.items()}
    return build_captioner(ModelConfig(d_model=16, num_heads=4, d_ff=32, feature_dim=8, **specs), 10)


def test_lr_scaling_by_sqrt_groups() -> None:
    """Sec. IV-C: the base rate is 1e-4 x sqrt(k); none leaves every model's rate alone."""
    plain = build_captioner(ModelConfig(d_model=16, num_heads=4, d_ff=32, feature_dim=8), 10)
    assert lr_scale("sqrt_groups", plain) == 1.0
    for k in (1, 2, 4):
        model = lw_model({"encoder_self_attention": k, "decoder_cross_attention": k, "feed_forward": k})
        assert lr_scale("sqrt_groups", model) == pytest.approx(math.sqrt(k))
        assert lr_scale("none", model) == 1.0
    scaled = Scaled(Constant(lr=1e-4), lr_scale("sqrt_groups", lw_model({"feed_forward": 2})))
    assert scaled.lr_at(3, 1) == pytest.approx(1.4142135e-4)
    with pytest.raises(ConfigError, match=r"train\.lr_scaling: sqrt_groups needs one group count, the model mixes k = \[2, 4\]"):
        lr_scale("sqrt_groups", lw_model({"encoder_self_attention": 2, "feed_forward": 4}))


def test_lr_scaling_is_checked_when_a_config_loads() -> None:
    from vlattn.validation import valid_config

    mixed = {"model": {"d_model": 16, "num_heads": 4, "encoder_self_attention": {"name": "gmha", "options": {"groups": 4}},
                       "feed_forward": {"name": "gffn", "options": {"groups": 2}}}}
    valid_config(mixed)  # mixing group counts is fine without the scaling
    with pytest.raises(ConfigError, match=r"train\.lr_scaling: sqrt_groups needs one group count"):
        valid_config({**mixed, "train": {"lr_scaling": "sqrt_groups"}})
    with pytest.raises(ConfigError, match=r"train\.lr_scaling: 'sqrt' is not one of: none, sqrt_groups"):
        valid_config({"train": {"lr_scaling": "sqrt"}})
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


def test_warmup_linear_follows_bert_adam() -> None:
    """BertAdam's warmup_linear(x, w) at x = s / T with its step count s starting at 1 (T = 20, w = 0.1): the
    rate climbs to lr at s = 2, then falls linearly to 0 at s = 20; the run's T fills an unset total_steps."""
    from vlattn.config import Spec
    from vlattn.training.schedules import WarmupLinear, build_schedule

    schedule = build_schedule(Spec("warmup_linear", {"lr": 5e-5, "warmup": 0.1}), d_model=8, total_steps=20)
    assert schedule == WarmupLinear(lr=5e-5, warmup=0.1, total_steps=20)
    rates = [schedule.lr_at(step, 0) for step in range(22)]
    assert rates[0] == pytest.approx(5e-5 * 0.05 / 0.1) and rates[1] == pytest.approx(5e-5)
    assert rates[10] == pytest.approx(5e-5 * (1 - 11 / 20) / 0.9)
    assert rates[19] == 0.0 and rates[21] == 0.0
    given = build_schedule(Spec("warmup_linear", {"total_steps": 7}), d_model=8, total_steps=20)
    assert given.total_steps == 7
