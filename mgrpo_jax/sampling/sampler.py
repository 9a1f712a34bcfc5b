"""Batched prefill + decode with a preallocated KV cache, in one jitted program.

`Sampler.generate` left-pads a batch of prompts of different lengths to a prompt bucket
P, pads the batch to a batch bucket, and runs one jitted function: a prefill of the P
prompt slots (logits of the last slot only), then decode steps that each sample a token
per row, record it and its log-probability, update the stop state, and feed it back
through the cache. The decode runs as one `lax.while_loop` per cache window (by default
steps [0, G/4) on a cache of P + G/4 slots, [G/4, G/2) on P + G/2, [G/2, G) on P + G;
`decode_windows`), so a step no longer attends over all P + G slots; the cache grows
(zero slots appended) between windows. Decoding stops as soon as every row has finished or `max_new_tokens`
steps ran. Shapes depend only on (batch bucket, P, generation bucket G, whether
top-k/top-p filtering is on), so a run compiles at most
|batch buckets| x |prompt buckets| x |generation buckets| x 2 programs; temperature,
top-k, top-p, max_new_tokens and the stop sequences are traced values.

Log-probabilities: by default (`logprobs="model"`) each generated token's entry is
log softmax(raw logits / T)[token], the model at the sampling temperature T (T = 1 when
greedy) without top-k or top-p, which is what `mgrpo_jax.models.token_logprobs` computes
for the trainer at the agent's `sampling.temperature`. `logprobs="sampling"`
reports the log-probability under the distribution actually sampled from (after
temperature, top-k and top-p; 0 for greedy).

Finish reasons: "eos" (an EOS id was generated, and is included), "stop" (a stop
sequence was generated, included; see `stop.py`), "length" (max_new_tokens reached).
Determinism: the step-t key is `fold_in(key, t)`; the same key, prompts and params give
the same tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.kv_cache import extend_cache, init_cache
from mgrpo_jax.models.logprobs import logprobs_from_logits
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.sampling.buckets import decode_windows, pick_bucket, powers_of_two
from mgrpo_jax.sampling.filters import choose_tokens
from mgrpo_jax.sampling.stop import pack_stop_sequences, stop_hits, stop_token_sequences

FINISH_REASONS = ("running", "eos", "stop", "length")
_RUNNING, _EOS, _STOP, _LENGTH = range(4)


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """Static choices of a sampler: shape buckets, decode windows and stop-array sizes.

  `decode_windows`: cache windows of the decode loop (`buckets.decode_windows`; 1: one
  loop over the whole cache): more windows attend over fewer empty cache slots, and each
  adds a decode loop to the program's compile time.
  """

  prompt_buckets: tuple[int, ...] = powers_of_two(16, 4096)
  generation_buckets: tuple[int, ...] = powers_of_two(16, 4096)
  batch_buckets: tuple[int, ...] = powers_of_two(1, 1024)
  decode_windows: int = 3
  max_stop_sequences: int = 8
  max_stop_length: int = 16
  max_eos_ids: int = 4


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Per-call choices (none of them changes the compiled program, except filtering on/off).

  Attributes:
    max_new_tokens: generation limit per row.
    temperature: 0 means greedy.
    top_k: keep the k most likely tokens (0: off).
    top_p: nucleus mass (1: off).
    stop_strings: strings ending a row (matched on token ids, see `stop.py`).
    stop_sequences: extra token-id sequences ending a row.
    stop_on_eos: stop a row after it generates an EOS id.
    logprobs: "model" (the model at `temperature`, 1 when greedy, unfiltered: the
      trainer's) or "sampling" (the sampled distribution, filters included).
  """

  max_new_tokens: int
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  stop_strings: tuple[str, ...] = ()
  stop_sequences: tuple[tuple[int, ...], ...] = ()
  stop_on_eos: bool = True
  logprobs: Literal["model", "sampling"] = "model"


@dataclasses.dataclass(frozen=True)
class SampleOutput:
  """What `Sampler.generate` returns (numpy, batch padding removed).

  Attributes:
    tokens: int32 [B, max_new_tokens]; pad id after each row's end.
    logprobs: float32 [B, max_new_tokens]; 0 after each row's end.
    lengths: int32 [B], generated ids per row (EOS / stop ids included).
    finish_reasons: B strings among "eos", "stop", "length".
  """

  tokens: np.ndarray
  logprobs: np.ndarray
  lengths: np.ndarray
  finish_reasons: list[str]

  def completion(self, row: int) -> list[int]:
    """The generated ids of `row`, without padding."""
    return self.tokens[row, :self.lengths[row]].tolist()


class Sampler:
  """Generates completions for batches of prompt ids with a fixed model graph."""

  def __init__(self, model: Transformer, tokenizer=None, *, eos_ids: Sequence[int] = (),
               pad_id: int | None = None, config: SamplerConfig | None = None):
    """Args:
      model: the policy; its current parameters are read at every `generate` call.
      tokenizer: optional, for EOS / pad ids and for encoding stop strings.
      eos_ids: EOS ids (default: the tokenizer's `eos_id`).
      pad_id: id written after a row ends (default: tokenizer's pad, else EOS, else 0).
    """
    self.model = model
    self.tokenizer = tokenizer
    self.config = config or SamplerConfig()
    eos = list(eos_ids) or ([tokenizer.eos_id] if tokenizer and tokenizer.eos_id is not None
                            else [])
    if len(eos) > self.config.max_eos_ids:
      raise ValueError(f"{len(eos)} EOS ids exceed max_eos_ids={self.config.max_eos_ids}")
    self.eos_ids = tuple(int(i) for i in eos)
    if pad_id is None and tokenizer is not None:
      pad_id = tokenizer.pad_id
    self.pad_id = int(pad_id if pad_id is not None else (self.eos_ids or (0,))[0])
    self._graphdef = nnx.graphdef(model)
    self._programs: set[tuple[int, int, int, bool]] = set()

  @property
  def num_programs(self) -> int:
    """Distinct (batch, prompt, generation, filtering) shapes compiled so far."""
    return len(self._programs)

  def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
               key: jax.Array) -> SampleOutput:
    """Samples a completion for every prompt (lists of ids, different lengths allowed)."""
    c, vocab = self.config, self.model.config.vocab_size
    if not prompts:
      raise ValueError("generate needs at least one prompt")
    for i, p in enumerate(prompts):
      if len(p) == 0:
        raise ValueError(f"prompt {i} is empty: every prompt needs at least one token")
      bad = [t for t in p if not 0 <= int(t) < vocab]
      if bad:
        raise ValueError(f"prompt {i} has ids outside [0, {vocab}): {bad[:5]}")
    if params.max_new_tokens <= 0:
      raise ValueError(f"max_new_tokens must be positive, got {params.max_new_tokens}")
    if params.logprobs not in ("model", "sampling"):
      raise ValueError(f"logprobs must be 'model' or 'sampling', got {params.logprobs!r}")
    batch = pick_bucket(len(prompts), c.batch_buckets, "batch size")
    prompt_len = pick_bucket(max(len(p) for p in prompts), c.prompt_buckets, "prompt length")
    gen_len = pick_bucket(params.max_new_tokens, c.generation_buckets, "max_new_tokens")

    tokens = np.full((batch, prompt_len), self.pad_id, np.int32)
    start = np.full((batch,), prompt_len - 1, np.int32)
    for i, p in enumerate(prompts):
      tokens[i, prompt_len - len(p):] = np.asarray(p, np.int32)
      start[i] = prompt_len - len(p)
    active = np.arange(batch) < len(prompts)
    sequences = list(params.stop_sequences)
    if params.stop_strings:
      if self.tokenizer is None:
        raise ValueError("stop_strings need a tokenizer; pass stop_sequences instead")
      sequences += [s for s in stop_token_sequences(self.tokenizer, params.stop_strings)
                    if s not in sequences]
    stop_ids, stop_lens = pack_stop_sequences(sequences, c.max_stop_sequences,
                                              c.max_stop_length)
    eos = np.full((c.max_eos_ids,), -1, np.int32)
    eos[:len(self.eos_ids)] = self.eos_ids
    filtering = params.top_k > 0 or params.top_p < 1.0
    self._programs.add((batch, prompt_len, gen_len, filtering))
    program = _Program(self._graphdef, decode_windows(gen_len, c.decode_windows), filtering,
                       self.pad_id)
    knobs = _Knobs(
        max_new=np.int32(params.max_new_tokens), temperature=np.float32(params.temperature),
        top_k=np.int32(params.top_k), top_p=np.float32(params.top_p),
        sampling_logprobs=np.bool_(params.logprobs == "sampling"))
    out_tokens, out_lp, lengths, reasons = _generate(
        nnx.state(self.model), key, _Prompts(tokens, start, active),
        _Stops(stop_ids, stop_lens, eos, np.bool_(params.stop_on_eos)), knobs, program=program)
    n, m = len(prompts), params.max_new_tokens
    return SampleOutput(
        tokens=np.asarray(out_tokens)[:n, :m], logprobs=np.asarray(out_lp)[:n, :m],
        lengths=np.asarray(lengths)[:n],
        finish_reasons=[FINISH_REASONS[r] for r in np.asarray(reasons)[:n]])


@dataclasses.dataclass(frozen=True)
class _Program:
  """What selects one compiled `_generate` (static, hashed into the jit cache key): the
  model graph, the decode windows (`decode_windows`: the step counts g_1 < ... < G at
  which the cache grows), whether top-k/top-p filtering is on, and the pad id."""

  graphdef: nnx.GraphDef
  windows: tuple[int, ...]
  filtering: bool
  pad_id: int


class _Prompts(NamedTuple):
  """The batch: tokens int32 [B, P] left-padded, start int32 [B] (each row's first
  prompt slot), active bool [B] (False: batch padding)."""

  tokens: jax.Array
  start: jax.Array
  active: jax.Array


class _Stops(NamedTuple):
  """What ends a row: stop sequences int32 [max_stop_sequences, max_stop_length] and
  their lengths int32 [max_stop_sequences] (`stop.pack_stop_sequences`), EOS ids int32
  [max_eos_ids] (-1: unused), and whether an EOS id ends a row (bool scalar)."""

  ids: jax.Array
  lengths: jax.Array
  eos: jax.Array
  on_eos: jax.Array


class _Knobs(NamedTuple):
  """The per-call scalars (traced: changing them reuses the program): max_new_tokens,
  temperature, top_k, top_p, and whether log-probs are the sampled distribution's."""

  max_new: jax.Array
  temperature: jax.Array
  top_k: jax.Array
  top_p: jax.Array
  sampling_logprobs: jax.Array


@functools.partial(jax.jit, static_argnames=("program",))
def _generate(state, key, prompts: _Prompts, stops: _Stops, knobs: _Knobs, *,
              program: _Program):
  """The jitted program: prefill, then one while_loop of decode steps per cache window.

  Shared by all samplers of the same model graph (the compile cache is keyed on
  `program` and shapes). Returns tokens, logprobs [B, G], lengths, reasons [B].
  """
  model = nnx.merge(program.graphdef, state)
  tokens, windows, pad_id = prompts.tokens, program.windows, program.pad_id
  batch, prompt_len = tokens.shape
  gen_len = windows[-1]
  cache = init_cache(model.config, batch, prompt_len + windows[0], prompts.start)
  logits, cache = model.forward_cached(tokens, cache, last_only=True)
  width = stops.ids.shape[1]
  init = dict(
      step=jnp.zeros((), jnp.int32), cache=cache, logits=logits[:, 0],
      tokens=jnp.full((batch, gen_len), pad_id, jnp.int32),
      logprobs=jnp.zeros((batch, gen_len), jnp.float32),
      lengths=jnp.zeros((batch,), jnp.int32), done=~prompts.active,
      reasons=jnp.zeros((batch,), jnp.int32),
      tail=jnp.full((batch, width), -1, jnp.int32))

  def cond(s):
    return (s["step"] < knobs.max_new) & ~jnp.all(s["done"])

  def body(s):
    step, done = s["step"], s["done"]
    ids, sampled_lp = choose_tokens(jax.random.fold_in(key, step), s["logits"],
                                    knobs.temperature, knobs.top_k, knobs.top_p,
                                    program.filtering)
    model_lp = logprobs_from_logits(
        s["logits"], ids, jnp.where(knobs.temperature > 0, knobs.temperature, 1.0))
    lp = jnp.where(knobs.sampling_logprobs, sampled_lp, model_lp)
    ids = jnp.where(done, pad_id, ids)
    lp = jnp.where(done, 0.0, lp)
    tail = jnp.concatenate([s["tail"][:, 1:], ids[:, None]], axis=1)
    hit_eos = stops.on_eos & jnp.any(ids[:, None] == stops.eos[None, :], axis=-1)
    hit_stop = stop_hits(tail, stops.ids, stops.lengths)
    newly = ~done & (hit_eos | hit_stop)
    reasons = jnp.where(newly, jnp.where(hit_eos, _EOS, _STOP), s["reasons"])
    new_logits, new_cache = model.forward_cached(ids[:, None], s["cache"])
    return dict(
        step=step + 1, cache=new_cache, logits=new_logits[:, 0],
        tokens=jax.lax.dynamic_update_slice(s["tokens"], ids[:, None], (0, step)),
        logprobs=jax.lax.dynamic_update_slice(s["logprobs"], lp[:, None], (0, step)),
        lengths=jnp.where(done, s["lengths"], step + 1), done=done | newly,
        reasons=reasons, tail=tail)

  final = init
  for end in windows:
    final = dict(final, cache=extend_cache(final["cache"], prompt_len + end))
    final = jax.lax.while_loop(lambda s, end=end: cond(s) & (s["step"] < end), body, final)
  reasons = jnp.where(prompts.active & ~final["done"], _LENGTH, final["reasons"])
  return final["tokens"], final["logprobs"], final["lengths"], reasons
