"""The single agent's scripted policy: S's steps inline, and the note of what it read."""

from __future__ import annotations

import pytest

from mgrpo_jax.agents.inline_oracle import InlineOracle
from mgrpo_jax.agents.oracle_policy import render_oracle_action
from mgrpo_jax.tasks.oracle import Step
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.symbolic.world import render_pages
from mgrpo_jax.tools import SearchIndex, default_registry
from mgrpo_jax.warm_start.budget import questions_for_tokens

SYMBOLIC = get_rendering("symbolic")


@pytest.fixture(scope="module")
def env():
  world = SYMBOLIC.split_worlds("tiny", 0, 1)[1]
  registry = default_registry(SearchIndex.from_pages(render_pages(world)), visit_budget=1500)
  return world, registry


def _play(oracle, question, registry):
  """The single agent's episode: [(action, observation)] until its answer."""
  history, turns = [], []
  while True:
    action = oracle.next_action(question, history)
    turns.append(action)
    if action.kind != "tool":
      return turns
    result = registry.call(action.name, dict(action.args))
    history.append(Step(action, result.text))


def test_each_turn_after_a_page_notes_the_fact_the_sub_agent_would_report(env):
  world, registry = env
  oracle = InlineOracle(SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.0, 0))
  entity = world.names[7]
  boss = world.value(7, "boss")
  home = world.value(world.names.index(boss), "home")
  turns = _play(oracle, f"{entity} boss home", registry)
  assert [(t.kind, t.name, dict(t.args)) for t in turns[:2]] == [
      ("tool", "visit", {"page": entity}), ("tool", "visit", {"page": boss})]
  assert turns[0].thought == ""  # nothing read yet: the fixed phrase
  assert turns[1].thought == f"boss {boss}" and turns[2].thought == f"home {home}"
  assert turns[2].kind == "answer" and turns[2].text == home
  assert render_oracle_action(turns[2]) == (
      f"<thinking>home {home}</thinking><result>{home}</result>")
  assert render_oracle_action(turns[0]).startswith("<thinking>I will call visit.</thinking>")


def test_the_noted_fact_carries_the_sub_agents_mistake(env):
  world, registry = env
  noisy = InlineOracle(SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(1.0, 0))
  mistaken = 0
  for index in range(40):
    turns = _play(noisy, f"{world.names[index]} boss", registry)
    noted = turns[-1].thought.split()
    assert noted[0] == "boss" and turns[-1].text == noted[1]
    mistaken += noted[1] != world.value(index, "boss")
  assert mistaken > 30  # S's neighbouring-line mistake, now the single agent's


def test_the_team_token_budget_scales_the_questions_up_never_down():
  assert questions_for_tokens(2000, 365834, 207471) == 3527
  assert questions_for_tokens(100, 50, 80) == 100
  with pytest.raises(ValueError, match="tokens >= 1"):
    questions_for_tokens(10, 5, 0)
