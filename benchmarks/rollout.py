"""Benchmark: lockstep rollouts, episodes/s and the share of wall time outside the policies.

  .venv/bin/python benchmarks/rollout.py [--batches 16,64] [--world tiny]

Rows (M and S through `make_controller("mgrpo", ...)`, B x K = batch, K = 4):
  model     the tiny random-weight model as M and S (turns end at the first malformed
            output, so most episodes are one M turn);
  thinking  oracle actions whose thinking is sampled by the tiny model (multi-turn
            episodes with tools and sub-agent calls, one sampler call per agent per round);
  oracle    the scripted oracles (no model; "policy" time is the oracles' own work).
System prompts are one short line (the tiny model's cost grows with prompt length, and
shorter prompts make the controller's share larger, not smaller).
"outside" is wall time minus the time inside M's and S's policy calls: rendering,
tokenizing observations, decoding and parsing turns, tools, records. Goal: under 10%
at batch 64 with the tiny model. Peer, measured in the same run: the same controller
run one episode at a time (batch 1 per policy call) on the first 16 episodes; the ratio
is lockstep episodes/s over one-at-a-time episodes/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import numpy as np

from mgrpo_jax.agents import (
  Agent,
  AgentLimits,
  OraclePolicy,
  RolloutConfig,
  SamplerPolicy,
  make_controller,
  specs,
)
from mgrpo_jax.agents.thinking_oracle import ThinkingOraclePolicy
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler, SamplerConfig
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools import SearchIndex, default_registry

K = 4
THINKING_TOKENS = 16
CONFIG = RolloutConfig(main=AgentLimits(max_turns=12, context_tokens=4096, max_new_tokens=32),
                       sub=AgentLimits(max_turns=6, context_tokens=4096, max_new_tokens=32))
MAIN_SPEC = dataclasses.replace(specs.MAIN, system="Tools: delegate(subtask), reason(problem).")
SUB_SPEC = dataclasses.replace(specs.SUB, system="Tools: search(query), visit(page).")
ORACLE_CONFIG = RolloutConfig(
  main=AgentLimits(max_turns=12, context_tokens=4096, max_new_tokens=256),
  sub=AgentLimits(max_turns=6, context_tokens=4096, max_new_tokens=256))


def _setup(world_size: str):
  w = world.generate_world(world_size, 0)
  page_list = pages.render_pages(w)
  registry = default_registry(SearchIndex.from_pages(page_list), top_n=3, visit_budget=600)
  qs = (questions.synthesize(w, 32, stage=1, seed=1, id_prefix="a")
        + questions.synthesize(w, 32, stage=2, seed=2, id_prefix="b"))
  corpus = [p.text for p in page_list] + [q.text for q in qs] + [
    s.system_prompt() for s in (MAIN_SPEC, SUB_SPEC)]
  tokenizer = SentencePieceTokenizer.train(corpus, tempfile.mkdtemp(), 2000)
  model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=4096), 0)
  sampler = Sampler(model, tokenizer, config=SamplerConfig(
    prompt_buckets=(512, 1024, 2048, 4096), generation_buckets=(16, 32),
    batch_buckets=(1, 16, 32, 64)))
  return registry, qs, tokenizer, SamplerPolicy(sampler)


def _controller(kind, registry, tokenizer, model_policy):
  if kind == "model":
    main = sub = Agent(model_policy, tokenizer)
    config = CONFIG
  elif kind == "thinking":
    main, sub = (Agent(ThinkingOraclePolicy(model_policy, oracle, tokenizer,
                                            thinking_tokens=THINKING_TOKENS), tokenizer)
                 for oracle in (OracleMainAgent(), OracleSubAgent()))
    config = ORACLE_CONFIG
  else:
    main = Agent(OraclePolicy(OracleMainAgent(), tokenizer), tokenizer)
    sub = Agent(OraclePolicy(OracleSubAgent(), tokenizer), tokenizer)
    config = ORACLE_CONFIG
  return make_controller("mgrpo", main, registry, config, sub=sub, main_spec=MAIN_SPEC,
                         sub_spec=SUB_SPEC)


def _measure(controller, tasks, seed):
  client = controller.sub_client
  sub_before = client.stats.policy_s
  out = controller.run(tasks, K, seed)
  policy_s = out.stats.main.policy_s + client.stats.policy_s - sub_before
  return out, out.stats.wall_s, policy_s


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default="16,64")
  parser.add_argument("--world", default="tiny")
  args = parser.parse_args(argv)
  batches = [int(b) for b in args.batches.split(",")]
  registry, qs, tokenizer, model_policy = _setup(args.world)
  print("| policy | batch (BxK) | episodes/s | M rounds | S calls | turns/episode | "
        "wall s | policy s | outside s | outside % |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  rates = {}
  for kind in ("model", "thinking", "oracle"):
    controller = _controller(kind, registry, tokenizer, model_policy)
    for batch in batches:
      tasks = qs[:batch // K]
      _measure(controller, tasks, 0)  # warm-up: compiles every shape of this row
      out, wall, policy = _measure(controller, tasks, 1)
      turns = np.mean([r.trajectory.num_turns for r in out.main])
      rates[kind, batch] = len(out.main) / wall
      print(f"| {kind} | {batch} | {len(out.main) / wall:.1f} | {out.stats.main.rounds} | "
            f"{out.stats.sub_calls} | {turns:.2f} | {wall:.2f} | {policy:.2f} | "
            f"{wall - policy:.3f} | {100 * (wall - policy) / wall:.1f} |")
  controller = _controller("model", registry, tokenizer, model_policy)
  controller.run(qs[:1], 1, 0)  # warm-up at batch 1
  start = time.perf_counter()
  episodes = 0
  for task in qs[:16 // K]:
    for k in range(K):
      episodes += len(controller.run([task], 1, k).main)
  sequential = episodes / (time.perf_counter() - start)
  print(f"\npeer: one episode at a time (model): {sequential:.1f} episodes/s; lockstep at "
        f"batch {batches[-1]}: {rates['model', batches[-1]]:.1f} episodes/s; ratio "
        f"{rates['model', batches[-1]] / sequential:.1f}x")


if __name__ == "__main__":
  main()
