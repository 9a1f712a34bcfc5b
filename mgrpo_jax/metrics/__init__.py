"""Run metrics: metrics.jsonl, TensorBoard event files, an optional Weights & Biases run,
the console lines of a step, and the machines a run computed on (`machine`)."""

from mgrpo_jax.metrics.progress import PhaseProgress, format_progress, format_step
from mgrpo_jax.metrics.wandb_run import WandbRun
from mgrpo_jax.metrics.writer import MetricsWriter, read_metrics

__all__ = ["MetricsWriter", "PhaseProgress", "WandbRun", "format_progress", "format_step",
           "read_metrics"]
