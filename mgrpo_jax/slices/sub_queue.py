"""S's FIFO of finished calls in the unsynchronized arm (`experiment.mode=unsynchronized`).

The paper's ablation of its synchronization (section 5.3.3, Fig. 8) trains S "from
off-policy data without considering sample-level alignment": in the released code every
finished S call joins one FIFO, and S's trainer takes a fixed number of calls from its
front per step, whatever their query, rollout or age. Here, at step t:

  batch(t)  = the first N calls of the queue at the start of t   (N = `mgrpo.queue_calls`)
  queue(t+1) = queue(t) without them, then step t's scored calls in arrival order

so S never trains on the calls of the step it is in: it does not wait for M's outcomes of
that step to choose its batch (the slice still steps with M, which makes the queue's order,
and the run, exact). When M makes more than N calls a step the queue grows and S trains
on ever older calls; the step's metrics say how old (`sub/queue_age_mean`) and how many
wait (`sub/queue_backlog`).

The queue at the start of step t is a write-ahead file `<workdir>/sub/queue/step_<t>.json`
(written before step t - 1's checkpoint, kept as long as the step caches are), so a
restarted slice resumes with exactly the queue it had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mgrpo_jax.agents.records import SubRecord
from mgrpo_jax.slices.step_cache import StepFiles
from mgrpo_jax.training.files import dump_json, parse_json


@dataclasses.dataclass(frozen=True)
class QueuedCall:
  """A scored S call (`expert` and `main_correct` filled in) and the step it was made in."""
  step: int
  record: SubRecord


def take(queue: Sequence[QueuedCall], count: int
         ) -> tuple[list[QueuedCall], list[QueuedCall]]:
  """(the first `count` calls of `queue`, the rest)."""
  return list(queue[:count]), list(queue[count:])


def queue_scalars(taken: Sequence[QueuedCall], queue: Sequence[QueuedCall], step: int
                  ) -> dict[str, float]:
  """What to log of step `step`'s queue: calls taken, their mean age in steps, and the
  calls left waiting after the step's own joined (`queue`)."""
  age = sum(step - c.step for c in taken) / len(taken) if taken else 0.0
  return {"sub/queue_taken": float(len(taken)), "sub/queue_age_mean": float(age),
          "sub/queue_backlog": float(len(queue))}


class SubCallQueue(StepFiles):
  """The queue at the start of each step, one file per step (module docstring)."""

  def name(self, step: int) -> str:
    return f"step_{step:08d}.json"

  def load(self, step: int) -> list[QueuedCall]:
    """The queue at the start of `step` (empty at step 0); a missing file after step 0
    is an error naming it."""
    data = self.folder.read(self.name(step))
    if data is None:
      if step == 0:
        return []
      raise FileNotFoundError(f"{self.folder.uri}/{self.name(step)}: the unsynchronized "
                              f"arm's queue at the start of step {step} is missing")
    fields = parse_json(data, f"{self.folder.uri}/{self.name(step)}")
    return [QueuedCall(int(c["step"]), SubRecord.from_dict(c["record"]))
            for c in fields["calls"]]

  def save(self, step: int, queue: Sequence[QueuedCall]) -> None:
    """Atomically stores the queue at the start of `step`."""
    self.folder.write(self.name(step), dump_json(
        {"step": step, "calls": [{"step": c.step, "record": c.record.to_dict()}
                                 for c in queue]}))
