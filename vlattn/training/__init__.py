"""Training: XE and SCST objectives, the shared loop, schedules, checkpoints, distributed helpers."""
