"""The warm start's demonstration worlds: the run's own first, then fresh worlds whose
names never meet the test world's, each searched through its own index."""

from __future__ import annotations

import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.tasks import datasets as datasets_lib
from mgrpo_jax.tasks.pages import render_pages
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.symbolic import questions as symbolic_questions
from mgrpo_jax.tasks.symbolic import world as symbolic_world
from mgrpo_jax.tasks.train_worlds import derived_world_seed
from mgrpo_jax.tasks.world_data import ensure_world, load_questions
from mgrpo_jax.tasks.world_setup import WorldSetup, question_mixture
from mgrpo_jax.tools.search import build_index
from mgrpo_jax.warm_start import demonstration_worlds as dw


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  config = base_config()
  apply_overrides(config, {"world.size": "tiny", "warm_start.num_questions": 31,
                           "warm_start.num_worlds": 3, "tools.search_top_n": 2})
  world_path = tmp_path_factory.mktemp("world")
  train, test = datasets_lib.make_split_worlds("tiny", int(config.world.seed),
                                               int(config.world.test_seed))
  build_index(render_pages(train), world_path / "index" / "train_world.sqlite")
  folder = tmp_path_factory.mktemp("warm_start")
  return config, train, test, folder, dw.demonstration_worlds(config, world_path, folder)


def test_too_few_questions_for_the_worlds_name_the_warm_start_keys(tmp_path):
  config = base_config()
  apply_overrides(config, {"warm_start.num_questions": 2, "warm_start.num_worlds": 3})
  with pytest.raises(ValueError, match=r"warm_start.num_questions \(2\) must be at least "
                     r"warm_start.num_worlds \(3\)"):
    dw.demonstration_worlds(config, tmp_path, tmp_path)


def test_world_zero_is_the_run_s_own_training_world(built):
  _, train, _, _, worlds = built
  assert [len(w.questions) for w in worlds] == [11, 10, 10]
  first = worlds[0]
  assert all(q.id.startswith("demo-") and not q.id.startswith("demo-w") for q in first.questions)
  entity = first.questions[0].path[0].subject
  assert entity in train.names
  hits = first.registry.call("search", {"query": entity}).text
  assert entity in hits


def test_other_worlds_are_new_and_never_use_test_names(built):
  config, train, test, folder, worlds = built
  test_names = set(test.names)
  for index, world in enumerate(worlds[1:], start=1):
    assert (folder / "worlds" / f"world_{index}.sqlite").exists()
    assert all(q.id.startswith(f"demo-w{index}-") for q in world.questions)
    subjects = {f.subject for q in world.questions for f in q.path}
    assert not subjects & test_names
    assert len(subjects - set(train.names)) > len(subjects) // 2  # mostly unseen names
    entity = next(f.subject for q in world.questions for f in q.path if f.subject)
    assert entity in world.registry.call("search", {"query": entity}).text
  seeds = {derived_world_seed(WorldSetup.from_config(config), "demonstration_world", i)
           for i in range(1, 50)}
  assert len(seeds) == 49 and int(config.world.test_seed) not in seeds



def _symbolic_config(types: str):
  config = base_config()
  apply_overrides(config, {"world.size": "tiny", "world.render": "symbolic",
                           "world.stage": "stage1", "world.question_types": types,
                           "warm_start.num_questions": 40, "warm_start.num_worlds": 2})
  return config


def _symbolic_world(types: str) -> WorldSetup:
  return WorldSetup.from_config(_symbolic_config(types))


def test_question_types_restrict_the_demonstrations(tmp_path):
  config = _symbolic_config("lookup, puzzle")
  train, _ = get_rendering("symbolic").split_worlds("tiny", 0, 1)
  build_index(symbolic_world.render_pages(train),
              tmp_path / "world" / "index" / "train_world.sqlite")
  worlds = dw.demonstration_worlds(config, tmp_path / "world", tmp_path / "warm_start")
  types = [q.type for w in worlds for q in w.questions]
  assert len(types) == 40 and set(types) == {"lookup", "puzzle"}


def test_question_mixture_keeps_the_named_types_weights():
  mixture = question_mixture(_symbolic_world("puzzle,three_hop"))
  full = symbolic_questions.STAGE1
  assert mixture.weights == {t: full.weights[t] for t in ("three_hop", "puzzle")}
  assert question_mixture(_symbolic_world("")) == full
  with pytest.raises(ValueError, match=r"world.question_types='lookup,multihop'.*multihop"):
    question_mixture(_symbolic_world("lookup,multihop"))


def test_question_types_filter_the_dataset_questions(tmp_path):
  everything = _symbolic_world("")
  world_path = ensure_world(tmp_path, everything)
  kept = _symbolic_world("lookup,puzzle")
  for split in ("train", "test"):
    questions = load_questions(world_path, everything, "stage1", split=split)
    filtered = load_questions(world_path, kept, "stage1", split=split)
    assert filtered == [q for q in questions if q.type in ("lookup", "puzzle")]
    assert 0 < len(filtered) < len(questions)
