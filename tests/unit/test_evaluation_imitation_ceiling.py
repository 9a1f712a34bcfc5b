"""The imitation ceiling of noisy demonstrations: 1 where no turn depends on an unseen
draw, max(p, 1 - p) on each turn that decides a mistake of rate p, and the oracle's own
actions unchanged by the scoring."""

from __future__ import annotations

import pytest

from mgrpo_jax.agents.inline_oracle import InlineOracle
from mgrpo_jax.evaluation.imitation_ceiling import CeilingScorer
from mgrpo_jax.tasks.oracle import Action, Step, run_episode
from mgrpo_jax.tasks.oracle import noise as noise_lib
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.symbolic import language
from mgrpo_jax.tasks.symbolic.world import render_pages
from mgrpo_jax.tools import SearchIndex, default_registry

SYMBOLIC = get_rendering("symbolic")
NEIGHBOUR_PROPS = ("boss", "maker")  # the symbolic S's `neighbour_value` targets


@pytest.fixture(scope="module")
def world_registry():
  world = SYMBOLIC.split_worlds("tiny", 0, 1)[0]
  return world, default_registry(SearchIndex.from_pages(render_pages(world)), visit_budget=5000)


def questions(world, types, n=40, seed=3):
  return SYMBOLIC.synthesize(world, n, stage=SYMBOLIC.stages[1].restricted(types), seed=seed)


def play(qs, registry, main, sub):
  """Every question played by the team; (M's scorer, S's scorer, episodes)."""
  main_scorer, sub_scorer = CeilingScorer(main), CeilingScorer(sub)
  episodes = [run_episode(q.text, main_scorer, sub_scorer, registry) for q in qs]
  return main_scorer, sub_scorer, episodes


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_oracles_without_uncertain_mistakes_have_ceiling_one(world_registry, rate):
  world, registry = world_registry
  qs = questions(world, ["lookup", "two_hop", "puzzle", "difference"])
  main_scorer, sub_scorer, _ = play(qs, registry, SYMBOLIC.main_oracle(rate, 0),
                                    SYMBOLIC.sub_oracle(rate, 0))
  assert main_scorer.scores and sub_scorer.scores
  assert set(main_scorer.scores) == {1.0} and set(sub_scorer.scores) == {1.0}


def test_m_decides_the_puzzle_tool_once_per_question_at_its_rate(world_registry):
  """A puzzle's first turn is `reason` or the delegated arithmetic (rate 0.7): ceiling
  0.7 there, 1 on every other turn."""
  world, registry = world_registry
  qs = questions(world, ["puzzle"])
  main_scorer, sub_scorer, _ = play(qs, registry, SYMBOLIC.main_oracle(0.7, 0),
                                    SYMBOLIC.sub_oracle(0.0, 0))
  uncertain = [s for s in main_scorer.scores if s < 1.0]
  assert uncertain == pytest.approx([0.7] * len(qs))
  assert set(sub_scorer.scores) <= {1.0}


def test_s_reports_of_targeted_properties_are_coin_flips(world_registry):
  """S's look-up is a visit and a report; the report of a `boss` or `maker` look-up
  depends on a draw of rate 0.5, every other turn on none."""
  world, registry = world_registry
  qs = questions(world, ["lookup"])
  main_scorer, sub_scorer, episodes = play(qs, registry, SYMBOLIC.main_oracle(0.0, 0),
                                           SYMBOLIC.sub_oracle(0.5, 0))
  targeted = sum(language.parse_subtask(call.subtask)[1] in NEIGHBOUR_PROPS
                 for episode in episodes for call in episode.sub_calls)
  assert 0 < targeted < len(qs)
  assert sorted(sub_scorer.scores) == [0.5] * targeted + [1.0] * (len(sub_scorer.scores) -
                                                                   targeted)
  assert len(sub_scorer.scores) == sum(len(e.sub_calls) for e in episodes) * 2
  assert set(main_scorer.scores) == {1.0}


class Recorded:
  """The actions a policy wrote, in order."""

  def __init__(self, policy):
    self.policy, self.actions = policy, []

  def next_action(self, task, history):
    self.actions.append(self.policy.next_action(task, history))
    return self.actions[-1]


def test_a_draw_shown_earlier_is_read_from_the_history(world_registry):
  """The single agent's chains: each hop's note of a targeted property is a coin flip
  where it is written; the later turns, which replay that hop, read it from the history
  and are certain."""
  world, registry = world_registry
  qs = questions(world, ["two_hop", "three_hop"])
  scorer = CeilingScorer(InlineOracle(SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.5, 0)))
  single = Recorded(scorer)
  for q in qs:
    run_episode(q.text, single, SYMBOLIC.sub_oracle(0.0, 0), registry)
  noted = [(a.thought.split() or [""])[0] in NEIGHBOUR_PROPS for a in single.actions]
  assert 0 < sum(noted) < len(noted)
  assert scorer.scores == [0.5 if n else 1.0 for n in noted]


def test_scoring_leaves_the_demonstrations_unchanged(world_registry):
  world, registry = world_registry
  qs = questions(world, ["lookup", "two_hop", "puzzle", "difference"])
  main, sub = SYMBOLIC.main_oracle(0.7, 0), SYMBOLIC.sub_oracle(0.5, 0)
  _, _, scored = play(qs, registry, main, sub)
  plain = [run_episode(q.text, main, sub, registry) for q in qs]
  assert [trace(e) for e in scored] == [trace(e) for e in plain]


def trace(episode):
  """An episode's answer and every action and observation (no tool latencies)."""
  def steps(ss):
    return [(s.action, s.observation) for s in ss]
  return (episode.answer, steps(episode.main_steps),
          [(c.subtask, steps(c.steps), c.report) for c in episode.sub_calls])


def test_the_single_agent_notes_carry_s_draws(world_registry):
  """The single agent's look-up: a visit, then the answer whose note is S's report:
  the note of a targeted property is the coin flip."""
  world, registry = world_registry
  qs = questions(world, ["lookup"])
  single = CeilingScorer(InlineOracle(SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.5, 0)))
  for q in qs:
    run_episode(q.text, single, SYMBOLIC.sub_oracle(0.0, 0), registry)
  targeted = sum(language.parse_question(q.text).props[0] in NEIGHBOUR_PROPS for q in qs)
  assert sorted(single.scores) == [0.5] * targeted + [1.0] * (len(single.scores) - targeted)
  assert single.ceiling == pytest.approx(1.0 - 0.5 * targeted / len(single.scores))


class SideOracle:
  """Writes the side its draw of rate 0.7 picks on every turn, without reading the
  history: a later turn repeats a draw that an earlier one showed."""

  def next_action(self, task, history):
    side = "left" if noise_lib.triggered(0.7, 0, "side", task) else "right"
    return Action.answer(f"{side} {len(history)}")


def test_a_draw_is_uncertain_until_a_turn_shows_it():
  scorer = CeilingScorer(SideOracle())
  first = scorer.next_action("q", [])
  scorer.next_action("q", [Step(first, "")])
  assert scorer.scores == pytest.approx([0.7, 1.0])


def test_a_draw_shown_in_one_trajectory_is_unknown_to_another_of_the_same_task():
  """Two rollouts of one question, their turns interleaved (as in a batch)."""
  scorer = CeilingScorer(SideOracle())
  first_a = scorer.next_action("q", [])
  first_b = scorer.next_action("q", [])
  scorer.next_action("q", [Step(first_a, "")])
  scorer.next_action("q", [Step(first_b, "")])
  assert scorer.scores == pytest.approx([0.7, 0.7, 1.0, 1.0])


class HiddenChoiceOracle:
  """Decides with its own coin, not `noise.triggered`: no replay can score it."""

  def __init__(self):
    self.turns = 0

  def next_action(self, task, history):
    self.turns += 1
    return Action.answer(str(self.turns))


def test_an_oracle_deciding_outside_the_draws_is_refused():
  with pytest.raises(RuntimeError, match="never wrote the turn's own action"):
    CeilingScorer(HiddenChoiceOracle()).next_action("q", [])
