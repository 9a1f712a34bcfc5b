"""RL over many training worlds (`world.train_worlds`): the questions are spread over the
worlds, and every tool call and r_expert goes to the world of the question it serves."""

from __future__ import annotations

import collections
import functools
import threading
import time

import numpy as np
import pytest

from mgrpo_jax.agents import Agent, AgentLimits, OraclePolicy, RolloutConfig, make_controller, score
from mgrpo_jax.config import ConfigError, apply_overrides, base_config, validate
from mgrpo_jax.tasks import judges
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.train_worlds import derived_world_seed, question_counts, training_tasks
from mgrpo_jax.tasks.world_data import ensure_world, load_questions
from mgrpo_jax.tasks.world_setup import WorldSetup
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools import TaskRoutedRegistry, ToolRegistry
from mgrpo_jax.training import agent_setup

SYMBOLIC = get_rendering("symbolic")
WORLDS = 4
LIMITS = RolloutConfig(main=AgentLimits(max_turns=8, context_tokens=8192, max_new_tokens=512),
                       sub=AgentLimits(max_turns=4, context_tokens=8192, max_new_tokens=512))


def _config(**world):
  config = base_config()
  apply_overrides(config, {"world.render": "symbolic", "world.size": "tiny",
                           "world.stage": "stage1", **{f"world.{k}": v for k, v in world.items()}})
  validate(config)
  return config


def _training_tasks(config, world_path):
  """`training_tasks` as the slices call it, with the run's tools."""
  return training_tasks(WorldSetup.from_config(config), world_path,
                        functools.partial(agent_setup.index_tool_registry, config=config))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  root = tmp_path_factory.mktemp("run")
  config = _config(train_worlds=WORLDS)
  world = WorldSetup.from_config(config)
  world_path = ensure_world(root, world)
  return config, world_path, load_questions(world_path, world, "stage1")


@pytest.fixture(scope="module")
def tasks(built):
  config, world_path, _ = built
  return _training_tasks(config, world_path)


def test_the_questions_are_spread_evenly_over_the_worlds(built, tasks):
  _, _, built_questions = built
  assert len(tasks.questions) == len(built_questions) == 400
  assert len({q.id for q in tasks.questions}) == 400
  assert tasks.questions[:100] == built_questions[:100]  # world 0 is the built world
  worlds = collections.Counter(q.id.split("-")[1] if q.id.startswith("train-w") else "w0"
                               for q in tasks.questions)
  assert worlds == {"w0": 100, "w1": 100, "w2": 100, "w3": 100}
  # Stage 1's types in every world.
  assert {q.type for q in tasks.questions[300:]} == {q.type for q in built_questions}


def test_the_rl_worlds_are_neither_the_demonstration_worlds_nor_the_test_world(built):
  world = WorldSetup.from_config(built[0])
  rl = {derived_world_seed(world, "train_world", i) for i in range(1, 100)}
  demo = {derived_world_seed(world, "demonstration_world", i) for i in range(1, 100)}
  assert len(rl) == 99 and not rl & demo and world.test_seed not in rl


def test_one_world_is_the_built_world_as_before(built):
  config, world_path, built_questions = built
  one = _training_tasks(_config(train_worlds=1), world_path)
  assert one.questions == built_questions
  assert isinstance(one.registry, ToolRegistry)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, tasks):
  """Any tokenizer does: the oracles' text is tokenized, never generated."""
  return SentencePieceTokenizer.train([q.text for q in tasks.questions],
                                      tmp_path_factory.mktemp("tok"), 300)


def _oracle_rollouts(tokenizer, registry, questions, expert_judge):
  main = Agent(OraclePolicy(SYMBOLIC.main_oracle(0.0, 0), tokenizer), tokenizer)
  sub = Agent(OraclePolicy(SYMBOLIC.sub_oracle(0.0, 0), tokenizer), tokenizer)
  out = make_controller("mgrpo", main, registry, LIMITS, sub=sub).run(questions, 1, 0)
  return score(out.main, out.sub, questions, judges.ExactMatchJudge(), expert_judge)


def test_each_question_is_answered_with_its_own_worlds_tools(tokenizer, tasks):
  """The clean oracles answer questions of all four worlds through the routed tools,
  and S's reports score r_expert 1 by their own world's judge; the same questions
  through world 0's tools fail where they need a look-up outside world 0."""
  sample = [q for i in range(WORLDS) for q in tasks.questions[100 * i:100 * i + 12]]
  main, sub = _oracle_rollouts(tokenizer, tasks.registry, sample, tasks.expert_judge)
  assert [r.correct for r in main] == [1.0] * len(sample)
  assert sub and np.mean([r.expert for r in sub]) == 1.0
  world_zero = tasks.registry.for_task(sample[0].id)
  main, _ = _oracle_rollouts(tokenizer, world_zero, sample, tasks.expert_judge)
  other = [r.correct for r, q in zip(main, sample, strict=True)
           if q.id.startswith("train-w") and q.type != "puzzle"]
  assert other and np.mean(other) < 0.5


def test_a_routed_registry_opens_each_world_once_and_names_an_unknown_task():
  opened = []

  def open_world(world):
    opened.append(world)
    return ToolRegistry()

  routed = TaskRoutedRegistry({"a": 0, "b": 1, "c": 1}, open_world)
  assert routed.for_task("b") is routed.for_task("c")
  assert routed.for_task("a") is not routed.for_task("b")
  assert opened == [1, 0]
  with pytest.raises(KeyError, match="no training world holds task 'd'"):
    routed.for_task("d")


def test_a_routed_registry_keeps_the_most_recently_used_worlds_open():
  opened = []

  def open_world(world):
    opened.append(world)
    return ToolRegistry()

  routed = TaskRoutedRegistry({f"q{w}": w for w in range(4)}, open_world, max_open=2)
  first = routed.for_task("q0")
  routed.for_task("q1")
  assert routed.for_task("q0") is first  # used again: now the most recent
  routed.for_task("q2")  # drops world 1, the least recently used
  assert routed.for_task("q0") is first
  routed.for_task("q1")  # opened again
  assert opened == [0, 1, 2, 1]
  with pytest.raises(ValueError, match="max_open must be >= 1, got 0"):
    TaskRoutedRegistry({}, open_world, max_open=0)


def test_threads_that_meet_a_new_world_together_open_it_once():
  opened, gate = [], threading.Barrier(8)

  def open_world(world):
    opened.append(world)
    time.sleep(0.05)  # a slow open: the other threads arrive meanwhile
    return ToolRegistry()

  routed = TaskRoutedRegistry({"a": 0}, open_world)
  got = []

  def ask():
    gate.wait()
    got.append(routed.for_task("a"))

  threads = [threading.Thread(target=ask) for _ in range(8)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert opened == [0] and len({id(r) for r in got}) == 1


def test_question_counts_split_the_total_evenly():
  assert question_counts(31, 3, total_key="t", worlds_key="w") == [11, 10, 10]
  assert question_counts(4, 4, total_key="t", worlds_key="w") == [1, 1, 1, 1]
  with pytest.raises(ValueError, match=r"^world.train_worlds's split \(2\) must be at least "
                     r"w \(3\)"):
    question_counts(2, 3, total_key="world.train_worlds's split", worlds_key="w")


def test_several_worlds_need_generated_questions():
  config = base_config()
  apply_overrides(config, {"world.train_worlds": 2, "world.source": "jsonl",
                           "world.source_path": "q.jsonl"})
  with pytest.raises(ConfigError, match="world.train_worlds"):
    validate(config)


def test_a_slow_world_open_does_not_hold_up_another_worlds():
  slow_started, other_started = threading.Event(), threading.Event()
  saw_other = []

  def open_world(world):
    if world == 0:  # waits for world 1's open, which must not wait for this one
      slow_started.set()
      saw_other.append(other_started.wait(timeout=10))
    else:
      other_started.set()
    return ToolRegistry()

  routed = TaskRoutedRegistry({"a": 0, "b": 1}, open_world)
  slow = threading.Thread(target=routed.for_task, args=("a",))
  slow.start()
  assert slow_started.wait(timeout=10)
  routed.for_task("b")
  slow.join()
  assert saw_other == [True]


def test_threads_waiting_on_a_failed_open_get_its_error_and_a_later_ask_opens_again():
  calls, asked, lock = [], [], threading.Lock()
  everyone_asked = threading.Event()

  def open_world(world):
    calls.append(world)
    if len(calls) == 1:
      everyone_asked.wait(timeout=10)
      time.sleep(0.5)  # the others, past their count, reach the wait for this open
      raise OSError("index locked")
    return ToolRegistry()

  routed = TaskRoutedRegistry({"a": 0}, open_world)
  errors = []

  def ask():
    with lock:
      asked.append(1)
      if len(asked) == 4:
        everyone_asked.set()
    try:
      routed.for_task("a")
    except OSError as exc:
      errors.append(str(exc))

  threads = [threading.Thread(target=ask) for _ in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert calls == [0] and errors == ["index locked"] * 4
  assert isinstance(routed.for_task("a"), ToolRegistry) and calls == [0, 0]
