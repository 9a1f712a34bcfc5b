"""Search at 10k pages: an entity's exact name ranks its page first."""

from __future__ import annotations

from mgrpo_jax.tasks import pages, world
from mgrpo_jax.tools import SearchIndex


def test_exact_name_ranks_first_in_10k_world(tmp_path):
  from mgrpo_jax.tools.search import build_index

  w = world.generate_world(10_000, 3)
  build_index(pages.render_pages(w), tmp_path / "index.sqlite")
  index = SearchIndex.open(tmp_path / "index.sqlite")
  assert len(index) == 10_000
  first = [index.search(name, 1)[0][1] == i for i, name in enumerate(w.names)]
  rate = sum(first) / len(first)
  assert rate >= 0.95, rate
  # Distractors exist: many names share a word with another page's title.
  shared = sum(len(index.search(name.split()[-1], 2)) == 2 for name in w.names[:500])
  assert shared >= 400
