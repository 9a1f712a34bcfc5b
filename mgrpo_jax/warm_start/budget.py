"""The single agent's demonstration budget: the team's demonstrated tokens (`warm_start.budget`).

The single agent plays both roles in one trajectory, so the team's budget of questions
would give it about half the tokens the two team agents are fine-tuned on together: in
the symbolic demo 2,000 questions are 0.13 M tokens for M and 0.26 M for S, but 0.22 M
for the single agent at a long context. With `warm_start.budget=team_tokens` it
demonstrates questions until its tokens reach the team's,

  n_single = ceil(n * T_team / T_single(n)),

T_team = tokens of M's and S's demonstrations of the n = `warm_start.num_questions`
questions, T_single(n) = the single agent's tokens on the same questions. The extra
questions come from the same worlds (each world's draw is seeded, so the first n are the
team's), and the epochs stay `warm_start.epochs`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mgrpo_jax.training.batching import TokenSequence


def demonstrated_tokens(sequences: Sequence[TokenSequence]) -> int:
  """Tokens the SFT reads of `sequences` (prompts, observations and turns)."""
  return sum(len(s.ids) for s in sequences)


def questions_for_tokens(num_questions: int, target_tokens: int, tokens: int) -> int:
  """Questions whose demonstrations hold about `target_tokens`, at the rate of `tokens`
  per `num_questions` questions (rounded up; at least `num_questions`)."""
  if num_questions < 1 or tokens < 1:
    raise ValueError(f"need num_questions >= 1 and tokens >= 1, got {num_questions}, {tokens}")
  return max(num_questions, math.ceil(num_questions * target_tokens / tokens))
