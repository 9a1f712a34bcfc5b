"""The judge model: any model this project loads, asked through its own sampler.

`SamplerJudgeModel` is the `tasks.model_judge.JudgeModel` of the `rewards.judge.*`
settings (`JudgeSettings`): a pretrained preset (`smollm2_135m`), a GGUF file or a
Hugging Face folder, or a preset trained from scratch with the parameter checkpoint of
`rewards.judge.checkpoint` (`checkpoint.save_params`, e.g. a warm start's) and its
tokenizer (`rewards.judge.tokenizer`, else the world's). Each prompt is one user
message in the model's chat template (`rewards.judge.chat_template`, as an agent's
`model.chat_template`), its assistant turn opened and started with the prompt's reply
prefix (if any), and a batch of them is one `Sampler.generate` call, greedy by default,
ending at the tokenizer's EOS or `max_new_tokens`.

The model is loaded on the first completion, so a run whose judge items are all cached
loads nothing. Its `identity` (preset or absolute path, checkpoint, tokenizer, chat
template, dtype) and sampling `settings` key the judge's cache: weights replaced under the
same path are not noticed (give the judge another `cache_dir`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mgrpo_jax.models import get_config, init_model, load_pretrained
from mgrpo_jax.sampling import Sampler, SamplerConfig, SamplingParams
from mgrpo_jax.sampling.buckets import powers_of_two
from mgrpo_jax.text import Tokenizer, render_chat
from mgrpo_jax.training.agent_setup import (
  PRETRAINED,
  chat_template,
  is_pretrained,
  load_tokenizer,
)
from mgrpo_jax.training.checkpoint import restore_params

# The context of a judge model trained from scratch (a pretrained one keeps its own).
SCRATCH_CONTEXT = 4096


@dataclasses.dataclass(frozen=True)
class JudgeSettings:
  """The `rewards.judge.*` settings (config/spec.py declares them, defaults included)."""

  preset: str
  checkpoint: str
  tokenizer: str
  chat_template: str
  dtype: str
  max_new_tokens: int
  temperature: float
  top_k: int
  top_p: float
  batch_size: int
  cache_dir: str
  failure_score: float
  evidence_chars: int
  verdict_format: str
  answer_prompt: str
  expert_prompt: str

  @classmethod
  def from_config(cls, rewards: Any) -> JudgeSettings:
    """From the config's `rewards` group."""
    judge = rewards.judge
    return cls(
        preset=str(judge.preset), checkpoint=str(judge.checkpoint),
        tokenizer=str(judge.tokenizer), chat_template=str(judge.chat_template),
        dtype=str(judge.dtype), max_new_tokens=int(judge.max_new_tokens),
        temperature=float(judge.temperature), top_k=int(judge.top_k),
        top_p=float(judge.top_p), batch_size=int(judge.batch_size),
        cache_dir=str(judge.cache_dir), failure_score=float(judge.failure_score),
        evidence_chars=int(judge.evidence_chars),
        verdict_format=str(judge.verdict_format), answer_prompt=str(judge.answer_prompt),
        expert_prompt=str(judge.expert_prompt))

  def cache_folder(self, root: str | pathlib.Path) -> pathlib.Path:
    """`cache_dir`, a relative one under `root` (the run's local folder)."""
    return pathlib.Path(root) / self.cache_dir


def _is_path(preset: str) -> bool:
  return preset not in PRETRAINED and pathlib.Path(preset).exists()


def _absolute(path: str) -> str:
  """`path` made absolute ("" stays "")."""
  return str(pathlib.Path(path).resolve()) if path else ""


class SamplerJudgeModel:
  """A `JudgeModel` sampling with `sampling.Sampler` (module docstring)."""

  def __init__(self, settings: JudgeSettings,
               world_tokenizer: Callable[[], Tokenizer] | None = None):
    """Args:
      settings: the judge's model, sampling and batch size.
      world_tokenizer: gives the world's tokenizer, for a preset trained from scratch
        without `settings.tokenizer` (called at load time only).
    """
    self.config = settings
    self.world_tokenizer = world_tokenizer
    self.batch_size = settings.batch_size
    self.completions = 0  # prompts the model completed (for tests and logs)
    self._loaded: tuple[Sampler, Tokenizer] | None = None

  @property
  def identity(self) -> dict[str, Any]:
    s = self.config
    return {"preset": _absolute(s.preset) if _is_path(s.preset) else s.preset,
            "checkpoint": _absolute(s.checkpoint), "tokenizer": _absolute(s.tokenizer),
            "chat_template": (s.chat_template if s.chat_template in ("auto", "chatml")
                              else _absolute(s.chat_template)),
            "dtype": s.dtype}

  @property
  def settings(self) -> dict[str, Any]:
    s = self.config
    return {"max_new_tokens": s.max_new_tokens, "temperature": s.temperature,
            "top_k": s.top_k, "top_p": s.top_p}

  def complete(self, prompts: Sequence[str], reply_prefix: str = "") -> list[str]:
    """The reply to each prompt after `reply_prefix`: one `Sampler.generate` call, EOS ids
    removed."""
    sampler, tokenizer = self.load()
    s = self.config
    primed = tokenizer.encode(reply_prefix) if reply_prefix else []
    ids = [render_chat(tokenizer, [{"role": "user", "content": p}],
                       add_generation_prompt=True).ids.tolist() + primed for p in prompts]
    key = jax.random.fold_in(jax.random.key(0), zlib.crc32("\n".join(prompts).encode()))
    out = sampler.generate(ids, SamplingParams(
        max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_k=s.top_k,
        top_p=s.top_p), key)
    eos = set(sampler.eos_ids)
    replies = []
    for row in range(len(prompts)):
      completion = out.completion(row)
      while completion and completion[-1] in eos:
        completion.pop()
      replies.append(tokenizer.decode(completion))
    self.completions += len(prompts)
    return replies

  @property
  def loaded(self) -> bool:
    """Whether the model is loaded (its first completion, or `load`, happened)."""
    return self._loaded is not None

  def load(self) -> tuple[Sampler, Tokenizer]:
    """The sampler and tokenizer, loaded on the first call."""
    if self._loaded is None:
      model, tokenizer = _load(self.config, self.world_tokenizer)
      tokenizer.chat_template = chat_template(self.config.chat_template, tokenizer,
                                              "rewards.judge.chat_template")
      context = model.config.max_seq_len
      config = SamplerConfig(
          prompt_buckets=powers_of_two(64, max(64, context - self.config.max_new_tokens)),
          generation_buckets=(self.config.max_new_tokens,),
          batch_buckets=tuple(sorted({*powers_of_two(1, self.batch_size), self.batch_size})),
          decode_windows=1)
      self._loaded = (Sampler(model, tokenizer, config=config), tokenizer)
    return self._loaded


def _load(settings: JudgeSettings, world_tokenizer: Callable[[], Tokenizer] | None):
  """(model, tokenizer) of `settings` (module docstring)."""
  dtype = jnp.bfloat16 if settings.dtype == "bfloat16" else jnp.float32
  if is_pretrained(settings.preset):
    model, tokenizer = load_pretrained(settings.preset, dtype=dtype)
    if settings.tokenizer:
      tokenizer = load_tokenizer(settings.tokenizer)
  else:
    if settings.tokenizer:
      tokenizer = load_tokenizer(settings.tokenizer)
    elif world_tokenizer is not None:
      tokenizer = world_tokenizer()
    else:
      raise ValueError(f"rewards.judge.tokenizer: the judge preset {settings.preset!r} is "
                       "trained from scratch and needs a tokenizer file")
    model = init_model(get_config(settings.preset, vocab_size=tokenizer.vocab_size,
                                  max_seq_len=SCRATCH_CONTEXT, dtype=dtype), 0)
  if settings.checkpoint:
    model = _with_checkpoint(model, settings.checkpoint)
  return model, tokenizer


def _with_checkpoint(model, directory: str):
  """`model` with the parameters of the parameter checkpoint in `directory`."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  abstract = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), params)
  try:
    restored, _ = restore_params(directory, abstract)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"rewards.judge.checkpoint {directory!r}: {e}") from None
  return nnx.merge(graphdef, restored, rest)
