"""Systematic mistakes for the noisy oracle (warm-start demonstrations with room for RL).

Mistakes are tied to a question shape or a relation, not drawn independently per step
(docs/WORLD.md, "Scripted agents"): with probability `rate` a *targeted* case gets
the mistake, decided by a hash of (seed, mistake, task text) so a replayed history gets
the same decision. Untargeted cases are never perturbed.

Main agent: `vague_min_hops` (chains with at least this many lookups are delegated as
one vague sub-task) and `wrong_tool_ops` (plan ops whose arithmetic is delegated to S
instead of the reason tool). Sub-agent: `skip_visit` (report a guess from the search
snippet), `wrong_extraction` (report another value from the page), `wrong_page` (open
the best non-exact hit, a distractor) for the listed properties.
"""

from __future__ import annotations

import dataclasses
import hashlib


@dataclasses.dataclass(frozen=True)
class MainNoise:
  vague_min_hops: int = 3
  wrong_tool_ops: tuple[str, ...] = ("difference", "expression")
  rate: float = 0.6
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class SubNoise:
  skip_visit: tuple[str, ...] = ("founded_by", "birth_year")
  wrong_extraction: tuple[str, ...] = ("located_in", "population")
  wrong_page: tuple[str, ...] = ("created_by", "length_km")
  rate: float = 0.6
  seed: int = 0


def triggered(rate: float, seed: int, mistake: str, text: str) -> bool:
  """Deterministic Bernoulli(rate) keyed by (seed, mistake, text)."""
  digest = hashlib.blake2b(f"{seed}\x00{mistake}\x00{text}".encode(), digest_size=8).digest()
  return int.from_bytes(digest, "big") / 2**64 < rate
