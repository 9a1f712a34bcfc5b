"""A policy mix for trainer tests: model-sampled thinking + the world oracle's action.

A random tiny model never writes a well-formed turn, so neither M nor S would ever
delegate, report or earn a reward. This wrapper (bound with gin in the trainer tests,
`mgrpo_jax.training.rollout_policy.wrapper = @trainer_policy_mix.ThinkingOracle`) keeps
the model in the loop: each turn is `<thinking>` + up to 8 ids sampled by the model
(with their log-probs, so the update trains on them) + the oracle's action; a turn
chosen by a hash of (key, turn) is the raw model sample instead (format 0), so rewards
and advantages vary. Everything is a deterministic function of the request and key.
"""

from __future__ import annotations

import hashlib

import gin
import numpy as np

from mgrpo_jax.agents import OraclePolicy, TurnOutput
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent
from mgrpo_jax.text import DEFAULT_USER_DEFINED_SYMBOLS

THINKING_TOKENS = 8
GARBAGE_PER_MILLE = 250


@gin.configurable
class ThinkingOracle:
  """Model thinking + oracle actions (module docstring); `version` is the model's."""

  def __init__(self, model_policy, tokenizer, role: str):
    self.model = model_policy
    self.oracle = OraclePolicy(OracleSubAgent() if role == "sub" else OracleMainAgent(),
                               tokenizer)
    self.special = {tokenizer.token_to_id(s) for s in DEFAULT_USER_DEFINED_SYMBOLS}
    self.think_open = tokenizer.token_to_id("<thinking>")
    self.think_close = tokenizer.token_to_id("</thinking>")

  @property
  def version(self) -> int:
    return self.model.version

  def _garbage(self, request) -> bool:
    text = f"{request.key}/{len(request.history)}".encode()
    return int(hashlib.sha256(text).hexdigest(), 16) % 1000 < GARBAGE_PER_MILLE

  def generate(self, requests, max_new_tokens, key):
    thoughts = self.model.generate(requests, min(THINKING_TOKENS, max_new_tokens), key)
    actions = self.oracle.generate(requests, max_new_tokens, key)
    outputs = []
    for request, thought, action in zip(requests, thoughts, actions, strict=True):
      if self._garbage(request):
        outputs.append(thought)
        continue
      ids = thought.ids.tolist()
      cut = next((i for i, t in enumerate(ids) if t in self.special), len(ids))
      tail = action.ids.tolist()[action.ids.tolist().index(self.think_close):]
      ids = [self.think_open] + ids[:cut] + tail
      logprobs = np.zeros(len(ids), np.float32)
      logprobs[1:1 + cut] = thought.logprobs[:cut]
      reason = "eos"
      if len(ids) > max_new_tokens:
        ids, logprobs, reason = ids[:max_new_tokens], logprobs[:max_new_tokens], "length"
      outputs.append(TurnOutput(np.asarray(ids, np.int32), logprobs, reason))
    return outputs
