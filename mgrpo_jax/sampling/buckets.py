"""Length and batch buckets: round shapes up so a long run compiles few programs.

Every jitted sampling program is specialized on (batch, prompt length, generation
length); rounding each up to the next bucket bounds the number of programs by the
product of the bucket list sizes, whatever lengths the run produces.
"""

from __future__ import annotations

from collections.abc import Sequence


def powers_of_two(low: int, high: int) -> tuple[int, ...]:
  """(low, 2 low, 4 low, ...) up to and including the first value >= high."""
  if low <= 0 or high < low:
    raise ValueError(f"need 0 < low <= high, got low={low}, high={high}")
  out = [low]
  while out[-1] < high:
    out.append(out[-1] * 2)
  return tuple(out)


def doubling_lengths(shortest: int, longest: int) -> tuple[int, ...]:
  """(shortest, 2 shortest, 4 shortest, ...) below `longest`, then `longest` itself."""
  return tuple(b for b in powers_of_two(shortest, longest) if b < longest) + (longest,)


def pick_bucket(n: int, buckets: Sequence[int], what: str) -> int:
  """The smallest bucket >= n; raises ValueError naming `what` if n exceeds them all."""
  for b in sorted(buckets):
    if b >= n:
      return b
  raise ValueError(f"{what} {n} exceeds the largest bucket {max(buckets)}; "
                   f"add a bucket (buckets: {sorted(buckets)})")


def decode_windows(gen_len: int, count: int) -> tuple[int, ...]:
  """The decode loop's cache windows: gen_len / 2^(count - 1), ..., gen_len / 2, gen_len
  (rounded up; duplicates dropped when gen_len is small).

  Decode step t (t < gen_len) runs on a cache of P + w slots, w the first window > t, so
  a step past the first window attends over at most twice the slots filled so far. A
  program holds one decode loop per window: `count` bounds what they add to compile time.
  """
  if count < 1:
    raise ValueError(f"need at least one decode window, got {count}")
  return tuple(sorted({-(-gen_len // 2**i) for i in range(count)}))
