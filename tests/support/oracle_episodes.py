"""Scripted oracles' episodes scored per question type (tests of both world renderings)."""

from __future__ import annotations

import collections

from mgrpo_jax.tasks import judges
from mgrpo_jax.tasks.oracle import run_episode


def accuracy_by_type(qs, main, sub, registry) -> dict[str, float]:
  """{question type: fraction of `qs` answered right} by M `main` and S `sub`."""
  by_type = collections.defaultdict(list)
  for q in qs:
    episode = run_episode(q.text, main, sub, registry)
    by_type[q.type].append(judges.answers_match(episode.answer or "", q.answer))
  return {t: sum(v) / len(v) for t, v in by_type.items()}
