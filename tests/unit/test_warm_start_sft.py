"""Warm start: noisy-oracle demonstrations, SFT through the policy update, its checkpoint."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from mgrpo_jax.agents import AgentLimits, RolloutConfig, protocol
from mgrpo_jax.models import get_config, init_model, token_logprobs
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent
from mgrpo_jax.tasks.oracle.noise import MainNoise, SubNoise
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools import SearchIndex, default_registry
from mgrpo_jax.training import (
  MeshConfig,
  OptimizerConfig,
  agent_setup,
  create_mesh,
  create_train_state,
  make_optimizer,
  make_update_fn,
)
from mgrpo_jax.training.batching import TokenSequence
from mgrpo_jax.training.checkpoint import restore_params
from mgrpo_jax.training.update import UpdateConfig
from mgrpo_jax.warm_start import demonstrations, sft
from tests.support import trees

BUCKETS = (1024, 1536)
TAIL = 384
CONFIG = RolloutConfig(main=AgentLimits(max_turns=24, context_tokens=8192, max_new_tokens=128),
                       sub=AgentLimits(max_turns=6, context_tokens=8192, max_new_tokens=128))
OPTIM = OptimizerConfig(learning_rate=1e-2, eps=1e-6, warmup_steps=1)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  w = world.generate_world("tiny", 11)
  page_list = pages.render_pages(w)
  registry = default_registry(SearchIndex.from_pages(page_list))
  qs = questions.synthesize(w, 16, stage=2, seed=2, id_prefix="b")
  tokenizer = SentencePieceTokenizer.train([p.text for p in page_list] + [q.text for q in qs],
                                           tmp_path_factory.mktemp("spm"), 800)
  demos = demonstrations.collect_demonstrations(tokenizer, registry, CONFIG, qs)
  return registry, qs, tokenizer, demos


def _tail(seq, length=TAIL):
  """The last `length` tokens of a demonstration (most of its sampled turns): fast on CPU."""
  mask = np.array(seq.loss_mask[-length:])
  mask[0] = 0.0
  return TokenSequence(seq.ids[-length:], mask, seq.logp[-length:])


def _model(tokenizer, seed=0):
  return init_model(get_config("tiny", vocab_size=tokenizer.vocab_size,
                               max_seq_len=max(BUCKETS)), seed=seed)


def _state(tokenizer, tx=None, seed=0):
  mesh = create_mesh(MeshConfig())
  return create_train_state(_model(tokenizer, seed), tx or make_optimizer(OPTIM), mesh, seed=0)


def test_demonstrations_are_the_records_sampled_tokens(env):
  registry, qs, tokenizer, demos = env
  assert len(demos.main) == len(qs)
  assert len(demos.sub) >= len(qs)
  for seq in demos.main + demos.sub:
    assert seq.loss_mask[0] == 0 and 0 < seq.loss_mask.sum() < len(seq)
    np.testing.assert_array_equal(seq.logp, 0.0)  # oracle "log-probs" are 0
  # The last sampled run of each M trajectory is its answer turn, ending with EOS.
  for seq in demos.main:
    assert seq.ids[np.flatnonzero(seq.loss_mask)[-1]] == tokenizer.eos_id
  # The noise is systematic and present: a clean oracle gives other trajectories.
  clean = demonstrations.collect_demonstrations(
    tokenizer, registry, CONFIG, qs, demonstrators=demonstrations.Demonstrators(
        main_oracle=OracleMainAgent(MainNoise(rate=0.0)),
        sub_oracle=OracleSubAgent(SubNoise(rate=0.0))))
  noisy_ids = [s.ids.tolist() for s in demos.main]
  clean_ids = [s.ids.tolist() for s in clean.main]
  assert sum(a != b for a, b in zip(noisy_ids, clean_ids, strict=True)) >= 1
  # Deterministic: the same call gives the same tokens.
  again = demonstrations.collect_demonstrations(tokenizer, registry, CONFIG, qs)
  assert [s.ids.tolist() for s in again.sub] == [s.ids.tolist() for s in demos.sub]


def test_each_agent_demonstrations_are_in_its_own_tokenizer(env, tmp_path):
  """M and S with different vocabularies (e.g. a pretrained M and a world-tokenizer S):
  each agent's sequences are exactly what its tokenizer alone would give."""
  registry, qs, tokenizer, demos = env
  corpus = [q.text for q in qs] + [p.text for p in pages.render_pages(world.generate_world(
      "tiny", 11))]
  # More ids than M's: S's turns stay within max_new_tokens, so M sees the same reports.
  sub_tokenizer = SentencePieceTokenizer.train(corpus, tmp_path, 1000)
  assert sub_tokenizer.vocab_size != tokenizer.vocab_size
  mixed = demonstrations.collect_demonstrations(
      tokenizer, registry, CONFIG, qs,
      demonstrators=demonstrations.Demonstrators(sub_tokenizer=sub_tokenizer))
  sub_only = demonstrations.collect_demonstrations(sub_tokenizer, registry, CONFIG, qs)
  assert [s.ids.tolist() for s in mixed.main] == [s.ids.tolist() for s in demos.main]
  assert [s.ids.tolist() for s in mixed.sub] == [s.ids.tolist() for s in sub_only.sub]
  assert [s.ids.tolist() for s in mixed.sub] != [s.ids.tolist() for s in demos.sub]
  assert max(int(s.ids.max()) for s in mixed.sub) < sub_tokenizer.vocab_size
  texts = [sub_tokenizer.decode(s.ids[s.loss_mask > 0].tolist()) for s in mixed.sub]
  assert sum('"name": "search"' in t for t in texts) == len(mixed.sub)


def _last_turn(seq):
  """The ids of the last sampled run (the answer turn)."""
  sampled = np.flatnonzero(seq.loss_mask)
  start = sampled[-1]
  while start - 1 in sampled:
    start -= 1
  return seq.ids[start:sampled[-1] + 1].tolist()


def test_single_agent_demonstrations_inline_the_sub_agent(env):
  registry, qs, tokenizer, demos = env
  single = demonstrations.collect_demonstrations(tokenizer, registry, CONFIG, qs,
                                             mode="single_agent")
  assert len(single.main) == len(qs) and single.sub == []
  # Same oracles, same systematic mistakes: the same final answers as M with S (the
  # single agent's answer turn thinks S's report first, so only the actions compare).
  def final_action(seq):
    parsed = protocol.parse_turn(tokenizer.decode(_last_turn(seq)))
    assert not isinstance(parsed, protocol.ParseError), parsed
    return (parsed.kind, parsed.name, json.dumps(parsed.arguments, sort_keys=True),
            parsed.text)
  answers = [final_action(s) for s in demos.main]
  assert [final_action(s) for s in single.main] == answers
  assert len(set(answers)) >= len(qs) // 2  # not one constant answer
  texts = [tokenizer.decode(seq.ids[seq.loss_mask > 0].tolist()) for seq in single.main]
  assert not any('"name": "delegate"' in t for t in texts)
  assert sum('"name": "visit"' in t for t in texts) >= len(qs) // 2  # S's visits, inlined
  main_texts = [tokenizer.decode(seq.ids[seq.loss_mask > 0].tolist()) for seq in demos.main]
  assert sum('"name": "delegate"' in t for t in main_texts) >= len(qs) // 2
  with pytest.raises(ValueError, match="mode must be one of"):
    demonstrations.collect_demonstrations(tokenizer, registry, CONFIG, qs, mode="frozen_sub")


def test_sft_update_gradient_equals_direct_nll_gradient(env):
  _, _, tokenizer, demos = env
  rows = 4
  state, layout = _state(tokenizer, tx=optax.sgd(1.0))
  before = jax.tree.map(np.asarray, state.params)
  batch = sft.sft_batches([_tail(s) for s in demos.sub[:3]], sft.SFTConfig(
    batch_rows=rows, buckets=(TAIL,)), epoch=0)[0]
  assert batch.weights.tolist() == [1, 1, 1, 0]  # one empty padding row

  def direct_nll(params):
    logp = token_logprobs(nnx.merge(layout.graphdef, params), jnp.asarray(batch.ids))
    mask = jnp.asarray(batch.loss_mask)
    return -jnp.sum(logp * mask) / jnp.sum(mask)

  expected = jax.jit(jax.grad(direct_nll))(state.params)
  expected = jax.tree.map(np.asarray, expected)
  update = make_update_fn(layout, sft.sft_update_config(), rows)
  state, metrics = update(state, batch)
  got = jax.tree.map(lambda a, b: a - np.asarray(b), before, state.params)  # lr 1 SGD
  assert float(metrics["ratio_min"]) == 1.0 and float(metrics["ratio_max"]) == 1.0
  flat_got, flat_expected = jax.tree.leaves(got), jax.tree.leaves(expected)
  assert len(flat_got) == len(flat_expected)
  for g, e in zip(flat_got, flat_expected, strict=True):
    np.testing.assert_allclose(g, e, rtol=2e-3, atol=2e-6)
  assert max(float(np.abs(e).max()) for e in flat_expected) > 1e-3  # not trivially 0


def test_sft_lowers_nll_and_saves_a_restorable_checkpoint(env, tmp_path):
  _, _, tokenizer, demos = env
  # A small slice keeps it fast: the tails of 8 S demonstrations, 2 batches per epoch.
  sequences = [_tail(s) for s in demos.sub[:8]]
  config = sft.SFTConfig(epochs=4, batch_rows=4, buckets=(TAIL,), seed=1)
  state, layout = _state(tokenizer)
  directory = str(tmp_path / "warm" / "sub")
  calls = []
  state, metrics = sft.sft(state, layout, sequences, config, checkpoint_dir=directory,
                                  progress=lambda done, total: calls.append((done, total)))
  nll = metrics["nll"]
  assert len(nll) == config.epochs + 1
  assert metrics["steps"] == config.epochs * 2
  assert calls == [(step, config.epochs * 2) for step in range(1, config.epochs * 2 + 1)]
  assert nll[-1] < 0.7 * nll[0], nll
  assert all(b < a for a, b in zip(nll, nll[1:], strict=False)), nll  # every epoch helps
  assert nll[0] > 5.0  # about log(800) at init
  # The parameter checkpoint restores bitwise into a fresh state of the same shape...
  fresh, fresh_layout = _state(tokenizer, seed=7)
  params, meta = restore_params(directory, fresh_layout.abstract.params)
  assert trees.tree_equal(params, state.params)
  np.testing.assert_allclose(meta["warm_start"]["nll"], nll)
  # ... and the RL trainers' `model.init_checkpoint` path accepts it, also into a state
  # with a reference policy (KL > 0): params and reference both become the warm start.
  trainer = agent_setup.AgentTrainer(fresh, fresh_layout, UpdateConfig(), OPTIM)
  assert not trees.tree_equal(trainer.state.params, state.params)
  agent_setup.restore_init_params(trainer, directory)
  assert trees.tree_equal(trainer.state.params, state.params)
  assert int(trainer.state.step) == 0
  with_ref, ref_layout = create_train_state(_model(tokenizer, 3), make_optimizer(OPTIM),
                                            create_mesh(MeshConfig()), seed=0,
                                            with_reference=True)
  ref_trainer = agent_setup.AgentTrainer(with_ref, ref_layout, UpdateConfig(), OPTIM)
  agent_setup.restore_init_params(ref_trainer, directory)
  assert trees.tree_equal(ref_trainer.state.params, state.params)
  assert trees.tree_equal(ref_trainer.state.ref_params, state.params)
  assert sft.demonstration_nll(trainer.state, fresh_layout, sequences,
                                      config) == pytest.approx(nll[-1], rel=1e-5)
  # The NLL on a subset is the NLL of exactly those sequences.
  subset = dataclasses.replace(config, nll_sequences=3)
  assert sft.demonstration_nll(trainer.state, fresh_layout, sequences, subset) == (
      pytest.approx(sft.demonstration_nll(
          trainer.state, fresh_layout, [sequences[i] for i in (0, 3, 7)], config), rel=1e-6))


def test_nll_subsets_are_evenly_spaced_and_all_for_zero():
  items = list(range(10))
  assert sft.nll_subset(items, 3) == [0, 4, 9]
  assert sft.nll_subset(items, 0) is items
  assert sft.nll_subset(items, 12) is items
  with pytest.raises(ValueError, match="nll_sequences"):
    sft.SFTConfig(nll_sequences=-1)


def test_length_groups_keep_every_sequence_once_and_cut_padding():
  rng = np.random.default_rng(0)
  lengths = rng.integers(20, 500, size=64)
  sequences = [TokenSequence(np.full(n, i, np.int32), np.r_[0, np.ones(n - 1)].astype(np.float32),
                             np.zeros(n, np.float32)) for i, n in enumerate(lengths)]
  buckets = (128, 256, 384, 512)
  plain = sft.SFTConfig(batch_rows=8, buckets=buckets, seed=3)
  grouped = sft.SFTConfig(batch_rows=8, buckets=buckets, seed=3, length_groups=8)

  def seen(batches):
    ids = [int(row[0]) for b in batches for row, w in zip(b.ids, b.weights, strict=True) if w]
    return sorted(ids)

  for epoch in range(2):
    plain_batches = sft.sft_batches(sequences, plain, epoch)
    grouped_batches = sft.sft_batches(sequences, grouped, epoch)
    assert seen(plain_batches) == seen(grouped_batches) == list(range(64))
    padded = [sum(b.ids.size for b in bs) for bs in (plain_batches, grouped_batches)]
    assert padded[1] < 0.8 * padded[0], padded
  assert [b.ids.tolist() for b in sft.sft_batches(sequences, grouped, 1)] == [
      b.ids.tolist() for b in sft.sft_batches(sequences, grouped, 1)]  # seeded
