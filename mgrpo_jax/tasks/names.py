"""Invented entity names from a seeded syllable generator.

Names are built from onset+vowel+coda syllables, so they are not words a pretrained
model knows. Each world draws its own syllable inventory (a seed-dependent subset), and
`NameGenerator` guarantees uniqueness within a world and disjointness from an
`exclude` set (the train world's names when the test world is generated).

Distractors come from shared parts: people share family names, species share genera,
organizations and events share stems with a different type word ("Velora Trust" vs
"Velora Guild"), and some cities have a "North"/"Upper" twin of another city.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "th", "sh", "kr", "tr", "br", "dr", "gl", "vr")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "k", "m")

ORG_WORDS = ("Trust", "Guild", "Works", "Company", "Society", "Institute", "Foundry",
             "Press", "Academy", "Exchange")
EVENT_WORDS = ("Festival", "Accord", "Games", "Congress", "Regatta", "Fair", "Summit")
ARTWORK_WORDS = ("Portrait", "Triptych", "Garden", "Tide", "Procession", "Lantern",
                 "Harbour", "Nocturne", "Vessel", "Tapestry")
CITY_PREFIXES = ("North", "Upper", "Port", "New")
# Inventory fraction per world: a seed-dependent subset of all syllables.
_INVENTORY_FRACTION = 0.6


def _all_syllables() -> list[str]:
  return sorted({o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS})


class NameGenerator:
  """Draws unique capitalized names for one world.

  Args:
    rng: the world's numpy Generator (all draws come from it, so names are seeded).
    exclude: names that must not be produced (e.g. another world's names).
  """

  def __init__(self, rng: np.random.Generator, exclude: Iterable[str] = ()):
    syllables = _all_syllables()
    keep = rng.permutation(len(syllables))[: int(len(syllables) * _INVENTORY_FRACTION)]
    self._syllables = np.array(sorted(syllables[i] for i in keep), dtype=object)
    self._rng = rng
    self._used: set[str] = set()
    self._exclude = frozenset(exclude)

  @property
  def used(self) -> frozenset[str]:
    return frozenset(self._used)

  def stems(self, n: int, *, min_syl: int = 2, max_syl: int = 3) -> list[str]:
    """`n` capitalized syllable words (not necessarily unique; vectorized draw)."""
    if n == 0:
      return []
    counts = self._rng.integers(min_syl, max_syl + 1, size=n)
    idx = self._rng.integers(0, len(self._syllables), size=(n, max_syl))
    parts = self._syllables[idx]
    rows = zip(parts.tolist(), counts.tolist(), strict=True)
    return ["".join(row[:k]).capitalize() for row, k in rows]

  def unique(self, n: int, make) -> list[str]:
    """`n` new unique names; `make(m)` proposes m candidates (vectorized)."""
    out: list[str] = []
    while len(out) < n:
      need = n - len(out)
      for name in make(need + need // 4 + 8):
        if name not in self._used and name not in self._exclude:
          self._used.add(name)
          out.append(name)
          if len(out) == n:
            break
    return out

  def _pick(self, pool: list[str], n: int) -> list[str]:
    return [pool[i] for i in self._rng.integers(0, len(pool), size=n).tolist()]

  def people(self, n: int) -> list[str]:
    """Given name + family name; family names are shared (~3 people each)."""
    families = self.stems(max(2, n // 3))

    def make(m):
      given = self.stems(m, min_syl=2, max_syl=2)
      return [f"{g} {f}" for g, f in zip(given, self._pick(families, m), strict=False)]
    return self.unique(n, make)

  def with_words(self, n: int, words: tuple[str, ...], *, share: float = 0.3) -> list[str]:
    """"Stem Word" names; about `share` of them reuse the stem of another name."""
    def make(m):
      stems = self.stems(m)
      reuse = self._rng.random(m) < share
      partner = self._rng.integers(0, m, size=m)
      choices = zip(stems, reuse.tolist(), partner.tolist(), strict=True)
      stems = [stems[p] if r else s for s, r, p in choices]
      return [f"{s} {w}" for s, w in zip(stems, self._pick(list(words), m), strict=False)]
    return self.unique(n, make)

  def cities(self, n: int, *, twin_share: float = 0.15) -> list[str]:
    """Plain stems; about `twin_share` are "North X"-style twins of another city."""
    base = self.unique(n, self.stems)
    twins = self._rng.random(n) < twin_share
    partners = self._rng.integers(0, n, size=n)
    prefixes = self._pick(list(CITY_PREFIXES), n)
    out = []
    for i, (twin, p) in enumerate(zip(twins.tolist(), partners.tolist(), strict=False)):
      candidate = f"{prefixes[i]} {base[p]}"
      if twin and p != i and candidate not in self._used and candidate not in self._exclude:
        self._used.discard(base[i])
        self._used.add(candidate)
        out.append(candidate)
      else:
        out.append(base[i])
    return out

  def countries(self, n: int) -> list[str]:
    return self.unique(n, lambda m: [s + "ia" for s in self.stems(m, min_syl=2, max_syl=2)])

  def rivers(self, n: int) -> list[str]:
    return self.unique(n, lambda m: [s + " River" for s in self.stems(m)])

  def species(self, n: int) -> list[str]:
    """Binomials "Genus epithet"; genera are shared (~4 species each)."""
    genera = self.stems(max(2, n // 4))

    def make(m):
      epithets = [e.lower() for e in self.stems(m, min_syl=2, max_syl=3)]
      return [f"{g} {e}" for g, e in zip(self._pick(genera, m), epithets, strict=False)]
    return self.unique(n, make)
