"""`derive_seed`: every seed of a run, derived from the run's seed and names by a hash.

A seed never comes from wall time or arrival order, so two runs of one config (or a
restarted slice) draw the same numbers: an agent's init, LoRA and train-state seeds
(`training.agent_config`), a generated world's seed and its questions'
(`tasks.train_worlds`), a purpose's PRNG key at a step (`training.agent_setup.step_key`).
"""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(seed: int, *names: Any) -> int:
  """A 31-bit seed determined by the run seed and the names (e.g. "init", "main")."""
  text = "/".join([str(int(seed))] + [str(n) for n in names]).encode()
  return int.from_bytes(hashlib.sha256(text).digest()[:4], "big") & 0x7FFFFFFF
