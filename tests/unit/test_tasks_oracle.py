"""The scripted oracle solves questions through the tools alone; the noisy oracle fails
systematically on the question types and relations its mistakes target."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.tasks import judges, pages, questions, world
from mgrpo_jax.tasks.oracle import (
  Action,
  MainNoise,
  OracleMainAgent,
  OracleSubAgent,
  Step,
  SubNoise,
  run_episode,
)
from mgrpo_jax.tasks.oracle import noise as noise_lib
from mgrpo_jax.tools import SearchIndex, default_registry
from tests.support.oracle_episodes import accuracy_by_type


@pytest.fixture(scope="module")
def env():
  w = world.generate_world("small", 21)
  registry = default_registry(SearchIndex.from_pages(pages.render_pages(w)))
  qs = (questions.synthesize(w, 200, stage=1, seed=5)
        + questions.synthesize(w, 200, stage=2, seed=6))
  return w, registry, qs


def test_oracle_policies_see_no_world():
  for cls in (OracleMainAgent, OracleSubAgent):
    params = inspect.signature(cls.__init__).parameters
    assert list(params) == ["self", "noise"]


def test_oracle_solves_through_tools(env):
  w, registry, qs = env
  main, sub = OracleMainAgent(), OracleSubAgent()
  judge = judges.ProgrammaticExpertJudge(w)
  correct, expert = 0, []
  for q in qs:
    episode = run_episode(q.text, main, sub, registry)
    correct += judges.answers_match(episode.answer or "", q.answer)
    expert += [judge(q, c.subtask, c.report) for c in episode.sub_calls]
    if q.type == "puzzle":
      assert not episode.sub_calls
      assert [s.action.name for s in episode.main_steps] == ["reason"]
    else:
      assert episode.sub_calls and all(
        [s.action.name for s in c.steps] == ["search", "visit"] for c in episode.sub_calls)
  assert correct / len(qs) >= 0.99
  assert sum(expert) / len(expert) >= 0.99


def test_policies_are_stepwise(env):
  _, registry, qs = env
  q = next(q for q in qs if q.type == "difference")
  main = OracleMainAgent()
  first = main.next_action(q.text, [])
  assert first.kind == "delegate" and first.text.startswith("Find the ")
  assert main.next_action(q.text, []) == first  # no hidden state
  sub = OracleSubAgent()
  action = sub.next_action(first.text, [])
  assert action.kind == "tool" and action.name == "search"
  assert dict(action.args) == {"query": first.text}  # the sub-task, copied whole
  observation = registry.call(action.name, dict(action.args)).text
  visit = sub.next_action(first.text, [Step(action, observation)])
  assert visit.kind == "tool" and visit.name == "visit"
  assert Action.answer("x").to_json() == '{"answer": "x"}'


def test_noisy_main_fails_on_targeted_types_only(env):
  _, registry, qs = env
  clean = accuracy_by_type(qs, OracleMainAgent(), OracleSubAgent(), registry)
  noisy = accuracy_by_type(qs, OracleMainAgent(MainNoise(rate=0.8)), OracleSubAgent(), registry)
  for targeted in ("puzzle", "difference"):
    assert noisy[targeted] <= clean[targeted] - 0.4, (targeted, noisy, clean)
  for untouched in ("lookup", "comparison", "count"):
    assert noisy[untouched] == clean[untouched]


def test_noisy_sub_fails_on_targeted_relations(env):
  _, registry, qs = env
  lookups = [q for q in qs if q.type == "lookup"]
  targeted = SubNoise(rate=0.8)
  hit = {*targeted.skip_visit, *targeted.wrong_extraction, *targeted.wrong_page}
  on = [q for q in lookups if q.path[0].relation in hit]
  off = [q for q in lookups if q.path[0].relation not in hit]
  assert len(on) >= 15 and len(off) >= 15
  noisy_main, noisy_sub = OracleMainAgent(), OracleSubAgent(targeted)
  acc_on = accuracy_by_type(on, noisy_main, noisy_sub, registry)["lookup"]
  acc_off = accuracy_by_type(off, noisy_main, noisy_sub, registry)["lookup"]
  assert acc_off == 1.0
  assert acc_on <= 0.6
  # Decisions are seeded: the same noise config gives the same answers.
  again = accuracy_by_type(on, noisy_main, OracleSubAgent(targeted), registry)["lookup"]
  assert again == acc_on


_NAMES = noise_lib.MAIN_MISTAKES + noise_lib.SUB_MISTAKES


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(_NAMES), st.floats(0.0, 1.0)))
def test_mistake_rates_round_trip(rates):
  text = " , ".join(f"{name} = {rate!r}" for name, rate in rates.items())
  assert noise_lib.parse_mistake_rates(text, _NAMES) == rates


@pytest.mark.parametrize("text, problem", [
    ("vague", "is not `mistake=rate`"),
    ("wrong_relation=0.5", "unknown mistake 'wrong_relation'"),
    ("vague=half", "rate of 'vague' is 'half', not a number"),
    ("vague=1.5", "outside [0, 1]"),
    ("vague=0.2,vague=0.3", "'vague' is given twice"),
])
def test_bad_mistake_rates_name_the_key_and_the_entry(text, problem):
  with pytest.raises(ValueError, match=r"^warm_start\.mistake_rates: ") as error:
    noise_lib.parse_mistake_rates(text, _NAMES)
  assert problem in str(error.value)


def test_a_per_mistake_rate_overrides_the_agents_rate(env):
  """M's mistakes at rate 1 with one of them at 0: that mistake's questions are solved
  again and the other's still fail (decisions are keyed by mistake and text)."""
  _, registry, qs = env

  def main_accuracy(noise):
    return accuracy_by_type(qs, OracleMainAgent(noise), OracleSubAgent(), registry)

  always = main_accuracy(MainNoise(rate=1.0))
  assert always["multihop"] < 0.7 and always["puzzle"] == always["difference"] == 0.0
  vague_off = main_accuracy(MainNoise(rate=1.0, rates=(("vague", 0.0),)))
  assert vague_off["multihop"] == 1.0 and vague_off["puzzle"] == vague_off["difference"] == 0.0
  tool_off = main_accuracy(MainNoise(rate=1.0, rates=(("wrong_tool", 0.0),)))
  assert tool_off["multihop"] == always["multihop"]
  assert tool_off["puzzle"] == tool_off["difference"] == 1.0
