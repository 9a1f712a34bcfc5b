"""The question mix where alignment acts (configs/local_demo.py:delegations): how many of
its rollouts the alignment to D slots changes."""

from __future__ import annotations

import collections
import importlib.util
import pathlib

import numpy as np
import pytest

from mgrpo_jax.config import validate
from mgrpo_jax.tasks.oracle import run_episode
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.symbolic.world import render_pages
from mgrpo_jax.tasks.world_setup import WorldSetup, question_mixture
from mgrpo_jax.tools import SearchIndex, default_registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYMBOLIC = get_rendering("symbolic")


@pytest.fixture(scope="module")
def config():
  spec = importlib.util.spec_from_file_location("local_demo", ROOT / "configs" / "local_demo.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config("delegations")
  validate(config)
  return config


@pytest.fixture(scope="module")
def call_counts(config):
  """S calls of the noisy oracles (the warm start's demonstrations) on 300 questions."""
  world = SYMBOLIC.split_worlds("tiny", 0, 1)[0]
  registry = default_registry(SearchIndex.from_pages(render_pages(world)), visit_budget=1500)
  mixture = question_mixture(WorldSetup.from_config(config))
  questions = SYMBOLIC.synthesize(world, 300, stage=mixture, seed=0)
  ws = config.warm_start
  main = SYMBOLIC.main_oracle(float(ws.main_noise_rate), 0)
  sub = SYMBOLIC.sub_oracle(float(ws.sub_noise_rate), 0)
  return np.array([len(run_episode(q.text, main, sub, registry).sub_calls) for q in questions])


def test_the_mix_spans_one_to_six_calls_per_rollout(call_counts, config):
  histogram = collections.Counter(call_counts.tolist())
  assert sorted(histogram) == [1, 2, 3, 4, 5, 6]
  assert call_counts.max() <= int(config.mgrpo.max_sub_calls)
  # The preset's D bounds the calls (the paper's P(calls <= D) ~ 0.99).
  assert np.mean(call_counts <= int(config.mgrpo.aligned_sub_calls)) >= 0.99


@pytest.mark.parametrize("slots", [6, 3])
def test_alignment_duplicates_or_drops_at_least_30_percent_of_rollouts(call_counts, slots):
  """A rollout of c != D calls has calls duplicated (c < D) or dropped (c > D)."""
  assert np.mean(call_counts != slots) >= 0.3
  if slots == 3:
    assert np.mean(call_counts > slots) >= 0.1  # some are dropped, not only duplicated
