"""Which decisions the sampled failures of a finished run come from.

  python tools/sampled_failures.py --workdir=<the run's workdir> [--samples=4]
      [--num_questions=100]

Loads the run's final RL checkpoints of M and S as its held-out evaluation does
(`evaluation.held_out.evaluation_inputs`: the run's `launch/config.py` over today's
defaults, its world and tokenizer under the workdir) and plays the evaluation's test
questions (`eval.num_questions`) once greedily and `--samples` times at the agents'
temperature, with the evaluation's key.

Each sampled rollout that answers wrong is walked turn by turn against the world's clean
scripted oracles, given the history the rollout actually had: M's turn against the clean
M's next action, and for a delegation S's turns against the clean S on that sub-task.
The FIRST turn that departs names the failure's category:

  M tool choice   M takes another kind of action than the clean M: delegates what it
                  should `reason`, calls `reason` for a look-up, answers early, ...
  M miscopy       the right kind of action with a wrong copy: the sub-task's entity or
                  property, the `reason` expression, the final answer
  M malformed     M's turn ends the rollout with a format error
  S wrong page    S visits another page than its sub-task's entity
  S misreport     S reports a wrong value (detail: the sub-task's property)
  S malformed     S's turn ends its trajectory with a format error
  S other         S reports without visiting, or visits again
  no departure    every turn is the clean oracles' (a limit ended the rollout, ...)

A wrong value built on by later hops (chain compounding) is counted at its first
departure; `before last hop` counts the failures whose departure came before the
question's last look-up, so that later turns were built on it. `value not read` counts
the wrong copies (M's miscopies, S's pages and reports) whose wrong value is nowhere in
what the agent had read (the question and observations; S's sub-task and page): a
token drawn from the vocabulary, not the wrong line copied.

It prints a markdown report: the measured greedy and sampled accuracy (next to the
run's `eval/final.json`), how many sampled failures fall on questions the greedy rollout
also fails, whether any right greedy rollout departs from the clean oracles (the walk's
own check: none should), and for the failures on questions the greedy rollout answers
right one row per category: count, share, counts by question type, the two counts
above, the mean, median and minimum probability the policy gave the token where the
turn's text first departs from the clean oracle's (the record's log-probability of that
sampled token), and the details.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mgrpo_jax.agents import oracle_policy, protocol, records
from mgrpo_jax.config import base, flat_values
from mgrpo_jax.config.modes import Mode, parse_mode
from mgrpo_jax.evaluation import held_out
from mgrpo_jax.tasks.oracle import Action, Step
from mgrpo_jax.tasks.symbolic import language
from mgrpo_jax.tasks.world_setup import WorldSetup

M_TOOL_CHOICE = "M tool choice"
M_MISCOPY = "M miscopy"
M_MALFORMED = "M malformed"
S_WRONG_PAGE = "S wrong page"
S_MISREPORT = "S misreport"
S_MALFORMED = "S malformed"
S_OTHER = "S other"
NO_DEPARTURE = "no departure"
CATEGORIES = (M_TOOL_CHOICE, M_MISCOPY, M_MALFORMED, S_WRONG_PAGE, S_MISREPORT, S_MALFORMED,
              S_OTHER, NO_DEPARTURE)


@dataclasses.dataclass(frozen=True)
class Turn:
  """One assistant turn of a trajectory: its text, the action it parsed to (None for the
  turn that ended the trajectory with a format error), what came back, and the sampled
  ids with their log-probabilities (None where they cannot be matched to the turn)."""
  text: str
  action: Action | None
  observation: str | None
  ids: np.ndarray | None = None
  logprobs: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Departure:
  """Where a trajectory first leaves the clean oracle: the turn's index, the oracle's
  action there and the turn (its action None when malformed)."""
  index: int
  expected: Action
  turn: Turn


@dataclasses.dataclass(frozen=True)
class Failure:
  """A classified sampled failure: category, detail (which copy, which property, ...),
  the departing token's probability (None if unknown), whether later hops were built on
  it, the question's type, and for a wrong copy whether the wrong value is absent from
  what the agent had read (None: not a copy)."""
  category: str
  detail: str
  probability: float | None
  before_last_hop: bool
  question_type: str = ""
  off_context: bool | None = None


def load_run_config(workdir: pathlib.Path):
  """The run's config: the values of its `launch/config.py` over the current defaults
  (keys added since the run keep their defaults)."""
  path = workdir / "launch" / "config.py"
  spec = importlib.util.spec_from_file_location("run_launch_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = base.base_config()
  base.apply_overrides(config, flat_values(module.get_config()))
  return config


def final_sources(config, mode: Mode, workdir: pathlib.Path) -> dict[str, held_out.Source]:
  """The RL checkpoints of the run's last step, per agent (as its "final" evaluation)."""
  last = int(config.experiment.num_steps)
  return {role: held_out.Source(str(workdir / "checkpoints" / role), "state", last)
          for role in mode.agents}


def play(config, mode: Mode, workdir: pathlib.Path, samples: int
         ) -> tuple[held_out.EvalSetup, held_out.EvalResult, held_out.EvalResult, Any]:
  """(setup, greedy result, sampled result, (M's tokenizer, S's)) of the run's final
  agents on its held-out questions, with the evaluation's key."""
  setup, main, sub = held_out.evaluation_inputs(config, mode, WorldSetup.from_config(config),
                                                workdir, final_sources(config, mode, workdir))
  key = held_out.evaluation_seed(config)
  greedy_main, greedy_sub = held_out.greedy_agents(main, sub)
  greedy = held_out.evaluate(setup, greedy_main, greedy_sub, samples=1, key=key)
  sampled = held_out.evaluate(setup, main, sub, samples=samples, key=key)
  return setup, greedy, sampled, (main.tokenizer, sub.tokenizer if sub else None)


def sampled_segments(trajectory: records.Trajectory) -> list[tuple[np.ndarray, np.ndarray]]:
  """(ids, log-probs) of each run of sampled ids (one per assistant turn), in order."""
  mask = np.asarray(trajectory.loss_mask, bool)
  edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
  return [(trajectory.ids[a:b], trajectory.logprobs[a:b])
          for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _observation(text: str) -> str:
  """A tool response's text without its tags (the answer-now notice as it is)."""
  if text.startswith(protocol.RESPONSE_OPEN) and text.endswith(protocol.RESPONSE_CLOSE):
    return text[len(protocol.RESPONSE_OPEN):-len(protocol.RESPONSE_CLOSE)]
  return text


def turns_of(trajectory: records.Trajectory, role: str) -> list[Turn]:
  """The assistant turns of a trajectory of agent `role` ("main" or "sub"), each with the
  observation that followed it; the last turn of a format error has no action."""
  messages = trajectory.messages[2:]  # after the system prompt and the task
  segments = sampled_segments(trajectory)
  texts = [text for speaker, text in messages if speaker == "assistant"]
  if len(segments) != len(texts):
    segments = [(None, None)] * len(texts)
  turns = []
  for i, (speaker, text) in enumerate(messages):
    if speaker != "assistant":
      continue
    after = messages[i + 1][1] if i + 1 < len(messages) else None
    last = len(turns) == len(texts) - 1
    parsed = protocol.parse_turn(text)
    malformed = (last and trajectory.end == records.END_FORMAT) or isinstance(
        parsed, protocol.ParseError)
    action = None if malformed else oracle_policy.to_oracle_action(parsed, role)
    ids, logprobs = segments[len(turns)]
    turns.append(Turn(text, action, None if after is None else _observation(after), ids,
                      logprobs))
  return turns


def same_action(a: Action, b: Action) -> bool:
  """Whether two actions do the same (their thoughts aside)."""
  return (a.kind, a.name, dict(a.args), a.text.strip()) == (b.kind, b.name, dict(b.args),
                                                            b.text.strip())


def first_departure(turns: Sequence[Turn], next_action: Callable[[list[Step]], Action]
                    ) -> Departure | None:
  """The first turn whose action is not `next_action(history so far)` (a malformed turn
  always departs), or None."""
  history: list[Step] = []
  for index, turn in enumerate(turns):
    expected = next_action(history)
    if turn.action is None or not same_action(turn.action, expected):
      return Departure(index, expected, turn)
    history.append(Step(turn.action, turn.observation or ""))
  return None


def action_kind(action: Action) -> str:
  """"delegate", "answer", "report" or the tool's name."""
  return action.name if action.kind == "tool" else action.kind


def _words(action: Action) -> list[str]:
  """The words an action copies: its text, or its arguments' values."""
  return " ".join([action.text, *map(str, action.args.values())]).split()


def off_context(wrong: Action, right: Action, context: str) -> bool:
  """Whether a word `wrong` has and `right` lacks is absent from `context`: a token the
  agent did not read anywhere (not a copy of the wrong thing that is there)."""
  extra = set(_words(wrong)) - set(_words(right))
  return not extra <= set(context.split())


def main_category(departure: Departure) -> tuple[str, str]:
  """(category, detail) of M's departing turn."""
  actual, expected = departure.turn.action, departure.expected
  if actual is None:
    return M_MALFORMED, f"at {action_kind(expected)}"
  if action_kind(actual) != action_kind(expected):
    return M_TOOL_CHOICE, f"{action_kind(actual)} for {action_kind(expected)}"
  if actual.kind == "delegate":
    got, want = language.parse_subtask(actual.text), language.parse_subtask(expected.text)
    if got and want and got[0] == want[0]:
      return M_MISCOPY, "sub-task property"
    return M_MISCOPY, "sub-task entity"
  return M_MISCOPY, "reason expression" if actual.kind == "tool" else "answer"


def sub_category(departure: Departure, subtask: str) -> tuple[str, str]:
  """(category, detail) of S's departing turn on `subtask` (detail: its property)."""
  actual, expected = departure.turn.action, departure.expected
  parsed = language.parse_subtask(subtask)
  prop = parsed[1] if parsed else "other"
  if actual is None:
    return S_MALFORMED, f"at {action_kind(expected)}"
  if action_kind(actual) == action_kind(expected) == "visit":
    return S_WRONG_PAGE, prop
  if action_kind(actual) == action_kind(expected) == "report":
    return S_MISREPORT, prop
  return S_OTHER, f"{action_kind(actual)} for {action_kind(expected)}"


def departing_probability(turn: Turn, expected_text: str, decode: Callable[[list[int]], str]
                          ) -> float | None:
  """The probability of the first sampled token of `turn` at which its text leaves
  `expected_text` (None without ids, or if the texts agree)."""
  if turn.ids is None or len(turn.ids) == 0:
    return None
  text = decode([int(i) for i in turn.ids])
  if text == expected_text:
    return None
  split = len(os.path.commonprefix([text, expected_text]))
  for k in range(1, len(turn.ids) + 1):
    if len(decode([int(i) for i in turn.ids[:k]])) > split:
      return float(math.exp(turn.logprobs[k - 1]))
  return float(math.exp(turn.logprobs[-1]))


def expected_text(action: Action, tokenizer) -> str:
  """The protocol text the clean oracle writes for `action` (the model's dialect)."""
  return oracle_policy.render_oracle_action(action, protocol.dialect_for(tokenizer))


def look_ups(question: str) -> int:
  """How many delegations the clean M makes for `question` (0 for a puzzle)."""
  plan = language.parse_question(question)
  if isinstance(plan, language.Chain):
    return len(plan.props)
  if isinstance(plan, language.ListQuestion):
    return len(plan.entities)
  return 2 if isinstance(plan, language.Difference) else 0


def classify(record: records.MainRecord, subs: Sequence[records.SubRecord], question,
             oracles: tuple[Any, Any], tokenizers: tuple[Any, Any]) -> Failure:
  """The failure of a wrong sampled rollout `record` (S's calls `subs`, by call index),
  by its first departure from the clean `oracles` (M's, S's); `tokenizers` are M's and
  S's."""
  main_oracle, sub_oracle = oracles
  calls = iter(sorted(subs, key=lambda s: s.call_index))
  history: list[Step] = []
  hop = 0  # the delegations made so far, the departing one included
  for index, turn in enumerate(turns_of(record.trajectory, "main")):
    expected = main_oracle.next_action(question.text, history)
    hop += expected.kind == "delegate"
    before_last = expected.kind == "delegate" and hop < look_ups(question.text)
    if turn.action is None or not same_action(turn.action, expected):
      category, detail = main_category(Departure(index, expected, turn))
      probability = departing_probability(turn, expected_text(expected, tokenizers[0]),
                                          tokenizers[0].decode)
      context = " ".join([question.text, *(step.observation for step in history)])
      return Failure(category, detail, probability, before_last and category == M_MISCOPY,
                     question.type, off_context(turn.action, expected, context)
                     if category == M_MISCOPY else None)
    if turn.action.kind == "delegate":
      call = next(calls, None)
      failure = call and sub_failure(call, sub_oracle, tokenizers[1])
      if failure:
        return dataclasses.replace(failure, question_type=question.type,
                                   before_last_hop=before_last)
    history.append(Step(turn.action, turn.observation or ""))
  return Failure(NO_DEPARTURE, record.trajectory.end, None, False, question.type)


def sub_failure(call: records.SubRecord, oracle, tokenizer) -> Failure | None:
  """S's failure on one call (its first departure from the clean S), or None."""
  turns = turns_of(call.trajectory, "sub")
  departure = first_departure(turns, lambda history: oracle.next_action(call.subtask, history))
  if departure is None:
    return None
  category, detail = sub_category(departure, call.subtask)
  probability = departing_probability(departure.turn,
                                      expected_text(departure.expected, tokenizer),
                                      tokenizer.decode)
  read = " ".join([call.subtask, *(t.observation or "" for t in turns[:departure.index])])
  return Failure(category, detail, probability, False, off_context=off_context(
      departure.turn.action, departure.expected, read)
      if category in (S_MISREPORT, S_WRONG_PAGE) else None)


@dataclasses.dataclass(frozen=True)
class Measurement:
  """What one run's rollouts gave: accuracies, the failures on questions the greedy
  rollout answers right, and the count on questions it fails."""
  greedy_accuracy: float
  sampled_accuracy: float
  num_sampled: int
  failures: list[Failure]
  failures_greedy_wrong: int
  greedy_departures: int


def measure(setup: held_out.EvalSetup, greedy: held_out.EvalResult,
            sampled: held_out.EvalResult, tokenizers: tuple[Any, Any]) -> Measurement:
  """Classifies the sampled failures of `sampled` on the questions `greedy` answers right;
  `greedy_departures` counts right greedy rollouts that depart from the oracle anyway
  (the walk's own check: it should be 0)."""
  oracles = (setup.rendering.main_oracle(0.0, 0), setup.rendering.sub_oracle(0.0, 0))
  greedy_right = {r.query_id for r in greedy.main if r.correct}
  subs = collections.defaultdict(list)
  for call in sampled.sub:
    subs[(call.query_id, call.rollout_index)].append(call)
  greedy_subs = collections.defaultdict(list)
  for call in greedy.sub:
    greedy_subs[(call.query_id, call.rollout_index)].append(call)
  failures = [classify(r, subs[r.key], sampled.questions[r.query_id], oracles, tokenizers)
              for r in sampled.main if not r.correct and r.query_id in greedy_right]
  departures = sum(
      classify(r, greedy_subs[r.key], greedy.questions[r.query_id], oracles,
               tokenizers).category != NO_DEPARTURE
      for r in greedy.main if r.correct)
  return Measurement(
      greedy_accuracy=float(greedy.summary["accuracy"]),
      sampled_accuracy=float(sampled.summary["accuracy"]),
      num_sampled=len(sampled.main), failures=failures,
      failures_greedy_wrong=sum(1 for r in sampled.main
                                if not r.correct and r.query_id not in greedy_right),
      greedy_departures=departures)


def _probabilities(failures: Sequence[Failure]) -> str:
  values = [f.probability for f in failures if f.probability is not None]
  if not values:
    return ""
  return f"{np.mean(values):.3f} / {np.median(values):.3f} / {np.min(values):.1e}"


def _not_read(failures: Sequence[Failure]) -> str:
  copies = [f.off_context for f in failures if f.off_context is not None]
  return str(sum(copies)) if copies else ""


def _details(failures: Sequence[Failure]) -> str:
  counts = collections.Counter(f.detail for f in failures)
  return ", ".join(f"{detail} {n}" for detail, n in counts.most_common())


def failure_table(failures: Sequence[Failure], types: Sequence[str]) -> list[str]:
  """The markdown table of the failures by category (module docstring)."""
  header = ["category", "count", "share", *types, "before last hop", "value not read",
            "p(departing token) mean / median / min", "detail"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  total = max(len(failures), 1)
  for category in CATEGORIES:
    chosen = [f for f in failures if f.category == category]
    if not chosen:
      continue
    by_type = collections.Counter(f.question_type for f in chosen)
    cells = [category, str(len(chosen)), f"{len(chosen) / total:.2f}",
             *(str(by_type.get(t, 0)) for t in types),
             str(sum(f.before_last_hop for f in chosen)), _not_read(chosen),
             _probabilities(chosen),
             _details(chosen)]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def report(measurement: Measurement, recorded: dict[str, Any] | None, types: Sequence[str],
           samples: int) -> str:
  """The printed report (module docstring)."""
  m = measurement
  recorded_text = ("" if recorded is None else
                   f" (the run's eval/final.json: {recorded['greedy']['accuracy']:.3f} greedy, "
                   f"{recorded['accuracy']:.3f} sampled over {recorded['num_rollouts']} "
                   "rollouts)")
  wrong = len(m.failures) + m.failures_greedy_wrong
  lines = [
      f"greedy accuracy {m.greedy_accuracy:.3f}, sampled {m.sampled_accuracy:.3f} "
      f"({samples} samples per question, {m.num_sampled} rollouts){recorded_text}",
      f"sampled failures {wrong}: {len(m.failures)} on questions the greedy rollout answers "
      f"right (classified below), {m.failures_greedy_wrong} on questions it fails; right "
      f"greedy rollouts that depart from the clean oracles: {m.greedy_departures}",
      "", *failure_table(m.failures, types)]
  return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True, help="a finished run's workdir")
  parser.add_argument("--samples", type=int, default=4,
                      help="sampled rollouts per question (default 4)")
  parser.add_argument("--num_questions", type=int, default=None,
                      help="the first n held-out questions (default: eval.num_questions)")
  return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
  args = parse_args(argv)
  workdir = pathlib.Path(args.workdir).resolve()
  config = load_run_config(workdir)
  if args.num_questions is not None:
    config.eval.num_questions = args.num_questions
  mode = parse_mode(str(config.experiment.mode))
  setup, greedy, sampled, tokenizers = play(config, mode, workdir, args.samples)
  final = workdir / "eval" / "final.json"
  recorded = json.loads(final.read_text()) if final.is_file() else None
  types = sorted({q.type for q in setup.questions})
  print(report(measure(setup, greedy, sampled, tokenizers), recorded, types, args.samples))


if __name__ == "__main__":
  main(sys.argv[1:])
