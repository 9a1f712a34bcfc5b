"""The main slice's query stream over the world's training questions.

`QueryStream` reads B questions per step from the training questions (read from the
built world by `tasks.world_data.load_questions`, spread over the training worlds by
`tasks.train_worlds`), through `grain.MapDataset.source(...).shuffle(seed).repeat()`;
its iterator state (`get_state` / `set_state`) goes into M's checkpoint, so a restarted
main slice reads exactly the queries it would have read.
"""

from __future__ import annotations

from typing import Any

import grain

from mgrpo_jax.tasks.questions import Question


class QueryStream:
  """B shuffled training questions per step, with a checkpointable iterator."""

  def __init__(self, questions: list[Question], *, seed: int, batch_size: int):
    if len(questions) < batch_size:
      raise ValueError(f"{len(questions)} training questions, fewer than B={batch_size}")
    self.batch_size = batch_size
    dataset = grain.MapDataset.source(questions).shuffle(seed=seed).repeat()
    self._iterator = iter(dataset)

  def next_batch(self) -> list[Question]:
    """The next B distinct questions (a repeat across an epoch boundary is skipped)."""
    batch: list[Question] = []
    while len(batch) < self.batch_size:
      question = next(self._iterator)
      if all(q.id != question.id for q in batch):
        batch.append(question)
    return batch

  def get_state(self) -> dict[str, Any]:
    return dict(self._iterator.get_state())

  def set_state(self, state: dict[str, Any]) -> None:
    self._iterator.set_state(dict(state))
