"""Training: the stage runner, the shared loop, XE and SCST objectives, schedules, the optimiser, checkpoints,
data-dependent initialisation (``prepare``), distributed helpers."""
