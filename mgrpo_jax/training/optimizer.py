"""The per-agent optimizer: AdamW with warm-up, a constant or cosine schedule, and clipping.

Each agent (main M, sub-agent S) owns one optax transformation built from its
`optim.*` config section (paper section 4: the two agents are optimized separately):

  g        <- g * min(1, grad_clip / ||g||_2)        [global-norm clipping, grad_clip > 0]
  lr(t)    =  learning_rate * (t + 1) / warmup_steps  for t < warmup_steps (linear warm-up)
              then constant, or a cosine decay to `final_lr_fraction * learning_rate`
              over the remaining `total_steps - warmup_steps` steps
  theta    <- AdamW(lr(t), b1, b2, eps, weight_decay)  [decay on matrices only]

Weight decay applies to parameters of rank >= 2 (projections, embeddings) and not to
the RMSNorm scales or biases, the usual choice for Llama-family models.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
  """AdamW settings of one agent (keys `main.optim.*` / `sub.optim.*`).

  Attributes:
    learning_rate: peak learning rate, reached after the warm-up.
    weight_decay: decoupled AdamW weight decay (rank >= 2 parameters only).
    b1: Adam beta_1.
    b2: Adam beta_2.
    eps: Adam epsilon.
    grad_clip: maximum global gradient norm; 0 turns clipping off.
    warmup_steps: steps of linear warm-up from learning_rate / warmup_steps.
    schedule: "constant" or "cosine" after the warm-up.
    total_steps: optimizer steps of the run; the cosine schedule reaches its floor there
      (required for "cosine"; a run of at most warmup_steps ends in the warm-up).
    final_lr_fraction: the cosine floor as a fraction of learning_rate.
  """

  learning_rate: float = 1e-5
  weight_decay: float = 0.1
  b1: float = 0.9
  b2: float = 0.98
  eps: float = 1e-8
  grad_clip: float = 1.0
  warmup_steps: int = 0
  schedule: str = "constant"
  total_steps: int | None = None
  final_lr_fraction: float = 0.0

  def __post_init__(self):
    if self.learning_rate < 0:
      raise ValueError(f"optim.learning_rate must be >= 0, got {self.learning_rate}")
    if self.weight_decay < 0:
      raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
    for name in ("b1", "b2"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f"optim.{name} must be in [0, 1), got {getattr(self, name)}")
    if self.eps <= 0:
      raise ValueError(f"optim.eps must be > 0, got {self.eps}")
    if self.grad_clip < 0:
      raise ValueError(f"optim.grad_clip must be >= 0 (0 = off), got {self.grad_clip}")
    if self.warmup_steps < 0:
      raise ValueError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
    if self.schedule not in SCHEDULES:
      raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
    if self.schedule == "cosine" and (self.total_steps is None or self.total_steps < 1):
      raise ValueError("optim.schedule='cosine' needs total_steps >= 1 (the run's optimizer "
                       f"steps), got total_steps={self.total_steps}")
    if not 0.0 <= self.final_lr_fraction <= 1.0:
      raise ValueError(f"optim.final_lr_fraction must be in [0, 1], got "
                       f"{self.final_lr_fraction}")

  @classmethod
  def from_config(cls, optim: Any, *, total_steps: int | None = None) -> OptimizerConfig:
    """Builds it from an `optim` ConfigDict section (`config.main.optim`).

    Args:
      optim: mapping with learning_rate, weight_decay, b1, b2, eps, grad_clip, warmup_steps,
        schedule (`micro_batch_size` belongs to `UpdateConfig`).
      total_steps: the run's optimizer steps (`experiment.num_steps`), for "cosine".
    """
    return cls(learning_rate=float(optim["learning_rate"]),
               weight_decay=float(optim["weight_decay"]), b1=float(optim["b1"]),
               b2=float(optim["b2"]), eps=float(optim["eps"]),
               grad_clip=float(optim["grad_clip"]),
               warmup_steps=int(optim["warmup_steps"]), schedule=str(optim["schedule"]),
               total_steps=total_steps)


def learning_rate_schedule(config: OptimizerConfig) -> optax.Schedule:
  """lr(t) for optimizer step t = 0, 1, ... (see the module docstring)."""
  peak = config.learning_rate
  if config.schedule == "constant":
    after = optax.constant_schedule(peak)
  else:
    # A run of no more steps than its warm-up ends inside it (one decay step, never taken).
    after = optax.cosine_decay_schedule(peak, max(1, config.total_steps - config.warmup_steps),
                                        alpha=config.final_lr_fraction)
  if config.warmup_steps == 0:
    return after
  warmup = optax.linear_schedule(peak / config.warmup_steps, peak, config.warmup_steps - 1)
  return optax.join_schedules([warmup, after], [config.warmup_steps])


def _decay_mask(params: Any) -> Any:
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
  """Global-norm clipping (when grad_clip > 0) followed by AdamW on `lr(t)`."""
  adamw = optax.adamw(learning_rate_schedule(config), b1=config.b1, b2=config.b2,
                      eps=config.eps, weight_decay=config.weight_decay, mask=_decay_mask)
  if config.grad_clip == 0:
    return adamw
  return optax.chain(optax.clip_by_global_norm(config.grad_clip), adamw)
