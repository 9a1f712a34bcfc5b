"""The warm start's demonstration worlds: the run's own first, then fresh worlds whose
names never meet the test world's, each searched through its own index."""

from __future__ import annotations

import pytest

from mgrpo_jax.agents.tools.search import build_index
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.tasks import datasets as datasets_lib
from mgrpo_jax.tasks.pages import render_pages
from mgrpo_jax.training import demonstration_worlds as dw


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


def test_question_counts_split_the_total_evenly():
  assert dw.question_counts(31, 3) == [11, 10, 10]
  assert dw.question_counts(4, 4) == [1, 1, 1, 1]
  with pytest.raises(ValueError, match="warm_start.num_questions"):
    dw.question_counts(2, 3)


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
  assert dw.world_seed(config, 1) != int(config.world.test_seed)
  assert len({dw.world_seed(config, i) for i in range(1, 50)}) == 49
