"""A policy that keeps an untrained model in the loop while a scripted oracle acts.

A random-weight model never writes a well-formed turn, so with it alone no episode
delegates, reports or earns a reward. `ThinkingOraclePolicy` makes each turn
`<thinking>` + up to `thinking_tokens` ids sampled by the model (with the model's
log-probs, so an update trains on them) + the oracle's action from its `</thinking>` on
(log-prob 0). A turn picked by a hash of (seed, episode key, turn index) is the model's
raw sample instead (almost always format 0), so rewards and advantages vary. Outputs
longer than `max_new_tokens` are cut and end with reason "length", as a sampler's would.

It exists to exercise multi-turn, delegating episodes and the trainers with untrained
models (tests, benchmarks); every output is a deterministic function of the requests
and the key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import jax
import numpy as np

from mgrpo_jax.agents import protocol
from mgrpo_jax.agents.oracle_policy import OraclePolicy
from mgrpo_jax.agents.policy import Policy, TurnOutput, TurnRequest
from mgrpo_jax.tasks.oracle.actions import MainPolicy, SubPolicy
from mgrpo_jax.text import DEFAULT_USER_DEFINED_SYMBOLS, Tokenizer


class ThinkingOraclePolicy:
  """Model-sampled thinking + oracle actions (see the module docstring)."""

  def __init__(self, model_policy: Policy, oracle: MainPolicy | SubPolicy,
               tokenizer: Tokenizer, *, thinking_tokens: int = 8, garbage_rate: float = 0.0,
               seed: int = 0):
    if thinking_tokens < 1:
      raise ValueError(f"thinking_tokens must be >= 1, got {thinking_tokens}")
    if not 0.0 <= garbage_rate <= 1.0:
      raise ValueError(f"garbage_rate must be in [0, 1], got {garbage_rate}")
    self.model = model_policy
    self.oracle = OraclePolicy(oracle, tokenizer)
    self.thinking_tokens = thinking_tokens
    self.garbage_rate = garbage_rate
    self.seed = seed
    self._special = {tokenizer.token_to_id(s) for s in DEFAULT_USER_DEFINED_SYMBOLS}
    self._think_open = tokenizer.token_to_id(protocol.THINK_OPEN)
    self._think_close = tokenizer.token_to_id(protocol.THINK_CLOSE)

  @property
  def version(self) -> int:
    """The model's policy version (0 when the model policy has none)."""
    return getattr(self.model, "version", 0)

  def _raw_turn(self, request: TurnRequest) -> bool:
    text = f"{self.seed}/{request.key}/{len(request.history)}".encode()
    return int(hashlib.sha256(text).hexdigest(), 16) % 1000 < 1000 * self.garbage_rate

  def generate(self, requests: Sequence[TurnRequest], max_new_tokens: int,
               key: jax.Array) -> list[TurnOutput]:
    thoughts = self.model.generate(requests, min(self.thinking_tokens, max_new_tokens), key)
    actions = self.oracle.generate(requests, max_new_tokens, key)
    outputs = []
    for request, thought, action in zip(requests, thoughts, actions, strict=True):
      if self._raw_turn(request):
        outputs.append(thought)
        continue
      sampled = thought.ids.tolist()
      cut = next((i for i, t in enumerate(sampled) if t in self._special), len(sampled))
      action_ids = action.ids.tolist()
      ids = [self._think_open] + sampled[:cut] + action_ids[action_ids.index(self._think_close):]
      logprobs = np.zeros(len(ids), np.float32)
      logprobs[1:1 + cut] = thought.logprobs[:cut]
      reason = "eos"
      if len(ids) > max_new_tokens:
        ids, logprobs, reason = ids[:max_new_tokens], logprobs[:max_new_tokens], "length"
      outputs.append(TurnOutput(np.asarray(ids, np.int32), logprobs, reason))
    return outputs
