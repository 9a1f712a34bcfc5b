"""Run metrics: metrics.jsonl, TensorBoard event files, and the console progress line."""

from mgrpo_jax.metrics.progress import format_progress
from mgrpo_jax.metrics.writer import MetricsWriter, read_metrics

__all__ = ["MetricsWriter", "format_progress", "read_metrics"]
