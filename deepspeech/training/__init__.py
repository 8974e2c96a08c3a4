"""Training: the loop (``trainer``), checkpoints, optimizers and schedules, determinism."""
