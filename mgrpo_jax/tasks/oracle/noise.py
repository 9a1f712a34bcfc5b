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

`rate` applies to every mistake of an agent; `rates` overrides it per mistake name
(`warm_start.mistake_rates`), so a researcher can calibrate one mistake, e.g. a mistake
that needs several right decisions in a row to be undone, without moving the others.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
from collections.abc import Callable, Collection, Iterator


@dataclasses.dataclass(frozen=True)
class MainNoise:
  vague_min_hops: int = 3
  wrong_tool_ops: tuple[str, ...] = ("difference", "expression")
  rate: float = 0.6
  seed: int = 0
  rates: tuple[tuple[str, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class SubNoise:
  skip_visit: tuple[str, ...] = ("founded_by", "birth_year")
  wrong_extraction: tuple[str, ...] = ("located_in", "population")
  wrong_page: tuple[str, ...] = ("created_by", "length_km")
  rate: float = 0.6
  seed: int = 0
  rates: tuple[tuple[str, float], ...] = ()


MAIN_MISTAKES = ("vague", "wrong_tool")
SUB_MISTAKES = ("skip_visit", "wrong_extraction", "wrong_page")


# (rate, (seed, mistake, text)) -> whether the mistake is made; None: `hashed_draw`.
MistakeDecider = Callable[[float, tuple[int, str, str]], bool]
_DECIDER: contextvars.ContextVar[MistakeDecider | None] = contextvars.ContextVar(
    "mistake_decider", default=None)


def hashed_draw(rate: float, seed: int, mistake: str, text: str) -> bool:
  """Deterministic Bernoulli(rate) keyed by (seed, mistake, text)."""
  digest = hashlib.blake2b(f"{seed}\x00{mistake}\x00{text}".encode(), digest_size=8).digest()
  return int.from_bytes(digest, "big") / 2**64 < rate


def triggered(rate: float, seed: int, mistake: str, text: str) -> bool:
  """Whether a targeted case gets `mistake`: `hashed_draw`, unless a `decided` block is
  open, whose decider answers instead."""
  decide = _DECIDER.get()
  if decide is None:
    return hashed_draw(rate, seed, mistake, text)
  return decide(rate, (seed, mistake, text))


@contextlib.contextmanager
def decided(decide: MistakeDecider) -> Iterator[None]:
  """Within the block, every oracle's mistake decision is `decide(rate, key)`: what an
  analysis of the demonstrations uses to replay a turn with other draws
  (`evaluation.imitation_ceiling`)."""
  token = _DECIDER.set(decide)
  try:
    yield
  finally:
    _DECIDER.reset(token)


def rate_of(noise, mistake: str) -> float:
  """The rate of one named mistake: its entry in `noise.rates`, else `noise.rate`."""
  return dict(noise.rates).get(mistake, noise.rate)


def parse_mistake_rates(text: str, known: Collection[str],
                        field: str = "warm_start.mistake_rates") -> dict[str, float]:
  """"name=rate,name=rate" -> {name: rate}; a clear error naming `field` otherwise.

  Args:
    text: comma-separated `mistake=rate` entries (empty: no overrides).
    known: the mistake names of the run's rendering (both agents').
    field: the config key named in errors.
  """
  rates = {}
  for entry in (e.strip() for e in text.split(",")):
    if not entry:
      continue
    name, sep, value = (part.strip() for part in entry.partition("="))
    if not sep:
      raise ValueError(f"{field}: entry {entry!r} is not `mistake=rate`")
    if name not in known:
      raise ValueError(f"{field}: unknown mistake {name!r}; this world's mistakes are "
                       f"{sorted(known)}")
    try:
      rate = float(value)
    except ValueError:
      raise ValueError(f"{field}: rate of {name!r} is {value!r}, not a number") from None
    if not 0.0 <= rate <= 1.0:
      raise ValueError(f"{field}: rate of {name!r} is {rate}, outside [0, 1]")
    if name in rates:
      raise ValueError(f"{field}: {name!r} is given twice")
    rates[name] = rate
  return rates
