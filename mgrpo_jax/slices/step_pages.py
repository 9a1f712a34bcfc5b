"""A training step's trajectory page: `<local>/report/rl_step_<t>.html` (t zero-padded to
5 digits, `trajectory_page.rl_step_page_name`; a held-out evaluation's pages are
`eval_*.html`).

Every `logging.trajectory_every` RL steps, from step 0, the main slice's writer process
renders the first `logging.trajectory_questions` questions of the step
(`metrics.trajectory_page`): each query's K rollouts side by side with R_M and A_M (the
group-relative advantage M is trained with), and under each delegation S's call with
R_S, A_S and the D slots it filled ("slot j", "slots j, j' (duplicated)", or "dropped":
the rollout made more than D calls). S's part is what the sub slice computes, by the
same pure functions (`step_math.sub_credit`) with the same alignment key, from the S
records M received from the service. What the main slice cannot know is said on the
page instead of guessed: `no_alignment` groups S's calls in the service's arrival order
(no A_S here), a frozen S is not updated (no A_S), and a step whose rollouts a restarted
slice read from its write-ahead cache has S's records only in shared_policy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mgrpo_jax.agents.records import MainRecord, SubRecord
from mgrpo_jax.agents.scoring import score_sub
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.evaluation.trajectories import PageCredit, page_questions
from mgrpo_jax.metrics import trajectory_page
from mgrpo_jax.slices import step_math
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.utils.atomic_files import atomic_write


def page_due(config, step: int) -> bool:
  """Whether step t writes a page (every `logging.trajectory_every` steps from 0)."""
  every = int(config.logging.trajectory_every)
  return every > 0 and step % every == 0


def slot_alignment(index: np.ndarray, valid: np.ndarray, call: int) -> str:
  """How call i of one rollout filled its D slots: index int [D], valid bool [D]."""
  slots = [int(j) for j in np.nonzero(valid & (index == call))[0]]
  if not slots:
    return "dropped (more calls than D slots)"
  if len(slots) == 1:
    return f"slot {slots[0]}"
  return f"slots {', '.join(map(str, slots))} (duplicated)"


def aligned_sub_credit(credit: step_math.SubCredit, query_ids: Sequence[str],
                       counts: np.ndarray, *, trained: bool
                       ) -> dict[tuple[str, int, int], tuple[float, float | None, str]]:
  """{(query id, k, i): (R_S, A_S or None, alignment)} of every call of an aligned step.

  A call's duplicates share one R_S, so one A_S (per-query normalization over slots);
  a dropped call, or any call of an S that is not trained, gets None.
  """
  out = {}
  for q, k in np.ndindex(*counts.shape):
    for i in range(int(counts[q, k])):
      filled = credit.valid[q, k] & (credit.index[q, k] == i)
      advantage = (float(credit.advantages[q, k][filled][0])
                   if trained and filled.any() else None)
      out[(query_ids[q], k, i)] = (credit.call_rewards[(q, k, i)], advantage,
                                   slot_alignment(credit.index[q, k], credit.valid[q, k], i))
  return out


def step_credit(config, mode: Mode, step: int, outcome: step_math.MainStep,
                sub: Sequence[SubRecord]) -> tuple[PageCredit, str]:
  """The step's credit of every rollout and S call, and a note on what it lacks.

  Args:
    config: the run's config: S's credit is computed with its reward weights,
      normalization and step t's alignment (`step_math.CreditConfig.from_config`,
      `SlotAlignment.of_step`), as the sub slice computes it.
    outcome: M's side of the step (R_M, A_M [Q, K]).
    sub: S's records of the step, scored (`expert` filled in).
  """
  query_ids, grid = outcome.query_ids, outcome.grid
  main = {(qid, k): (float(outcome.reward[q, k]), float(outcome.advantage[q, k]))
          for q, qid in enumerate(query_ids) for k in range(outcome.reward.shape[1])}
  counts = grid["num_sub_calls"]
  if not mode.sub_agent:
    return PageCredit(main, {}), ""
  if len(sub) != int(counts.sum()):
    return PageCredit(main, {}), ("S's records of this step are not here (a restarted step "
                                  "read from the write-ahead cache): M's side only")
  indexed = step_math.index_sub_records(sub, query_ids, counts)
  credit = step_math.CreditConfig.from_config(config)
  if not mode.aligned:
    reward_of = step_math.sub_rewards(indexed, grid["correct"], credit.weights)
    calls = {(query_ids[q], k, i): (r, None, "") for (q, k, i), r in reward_of.items()}
    return PageCredit(main, calls), ("no_alignment: S's rows are grouped in the service's "
                                     "arrival order, so A_S is not shown here")
  slots = step_math.sub_credit(indexed, outcome.reward, grid["correct"], counts,
                               alignment=step_math.SlotAlignment.of_step(config, step),
                               credit=credit)
  trained = mode.sub_trained or mode.shared
  note = "" if trained else "S is frozen in this mode: its calls get no advantage"
  return PageCredit(main, aligned_sub_credit(slots, query_ids, counts, trained=trained)), note


def write_step_page(config, paths: RunPaths, mode: Mode, step: int,
                    outcome: step_math.MainStep, main: Sequence[MainRecord],
                    sub: Sequence[SubRecord], scoring: step_math.Scoring) -> None:
  """Writes step t's page (module docstring).

  Args:
    outcome: M's side of the step (`step_credit`).
    main: the step's scored M records; sub: S's records as M received them (scored or
      not: they are scored here with `scoring`'s judge, if any, and the correctness of
      M's records).
    scoring: the training questions by id and r_expert.
  """
  query_ids, reward = outcome.query_ids, outcome.reward
  step_questions = {qid: scoring.questions[qid] for qid in query_ids}
  if sub and scoring.judge is not None:
    sub = score_sub(sub, step_questions, {r.key: r.correct for r in main}, scoring.judge)
  credit, note = step_credit(config, mode, step, outcome, sub)
  limit = int(config.logging.trajectory_questions)
  shown = page_questions(main, sub, step_questions, limit=limit, credit=credit)
  notes = [f"mode {mode.name}; B = {len(query_ids)} queries x K = {reward.shape[1]} "
           f"rollouts, D = {int(config.mgrpo.aligned_sub_calls)} slots; mean R_M "
           f"{float(reward.mean()):.3f}, accuracy {float(outcome.grid['correct'].mean()):.3f}",
           f"showing the first {len(shown)} questions (logging.trajectory_questions = "
           f"{limit})"] + ([note] if note else [])
  html = trajectory_page.render(f"RL step {step}", shown, notes=notes)
  atomic_write(paths.local / "report" / trajectory_page.rl_step_page_name(step), html.encode())
