"""The symbols of the symbolic world; each is one token of the agents' tokenizer.

  names       "E000" .. "E255": the shared pool every world draws its entities from
  relations   six entity-to-entity relations ("boss", "home", ...)
  year        the one attribute; its values are the year symbols "1900" .. "1999"
  numbers     "0" .. "299": page ids, puzzle operands, differences and results

A number symbol and a year symbol never collide ("1954" is a year, "195" a number) and
SentencePiece matches user-defined symbols longest first, so "1954" stays one token.

A property followed by a space ("boss ", written "boss\u2581" as SentencePiece sees
it) is a symbol of its own, so a page line or a report "boss E044" is two tokens,
[boss ][E044]: the value directly follows the property token, and an induction head
with smeared keys (the key of a position mixes in its previous token's) finds it in one
step from the reader's own "boss ". With the space as a token of its own, the value
sits two positions after the property and a 2-layer model from scratch learned to
copy it in 9% of the demo's turns instead of most (docs/RESULTS.md).
"""

from __future__ import annotations

NAME_POOL: tuple[str, ...] = tuple(f"E{i:03d}" for i in range(256))
RELATIONS: tuple[str, ...] = ("boss", "home", "maker", "owner", "rival", "friend")
YEAR = "year"
PROPERTIES: tuple[str, ...] = (*RELATIONS, YEAR)
YEARS: tuple[str, ...] = tuple(str(y) for y in range(1900, 2000))
NUMBERS: tuple[str, ...] = tuple(str(n) for n in range(300))
SEE = "see"
NONE = "none"
OPERATORS: tuple[str, ...] = ("+", "-", "*")


SPACE = "\u2581"


def symbols() -> tuple[str, ...]:
  """Every symbol that must be one token (the tokenizer's user-defined symbols)."""
  return (*NAME_POOL, *PROPERTIES, *(p + SPACE for p in PROPERTIES), *YEARS, *NUMBERS)
