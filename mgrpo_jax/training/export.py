"""One agent of a run as a Hugging Face folder (`launch/export_hf.py`).

`export_agent(config, workdir, role, out)` rebuilds the agent's model and tokenizer from
the run's config (`agent_setup.build_model`: the same shape, vocabulary and chat
template as in training), loads the weights of its newest RL checkpoint
(`<workdir>/checkpoints/<role>`, or with `step` the newest at or before it), or, when
RL has saved none, its warm start's parameter checkpoint, and writes them with
`models.weights.hf_export.export_hf_folder`: config.json, model.safetensors, the
tokenizer files and the chat template (the model's own, else ChatML), plus the modeling
file of a smeared-key model. An agent with LoRA adapters is written merged (W + (alpha
/ r) A B); with `adapter_out` its adapters are also written as a PEFT adapter folder
(`models.weights.peft_adapter`) whose base is the agent's Hugging Face folder, or, for a
GGUF base, the frozen base written as one in `<adapter_out>/base`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.models.lora import base_model
from mgrpo_jax.models.weights.hf_export import export_hf_folder
from mgrpo_jax.models.weights.peft_adapter import save_peft_adapter
from mgrpo_jax.text import CHATML_TEMPLATE
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.checkpoint import AgentCheckpointer, restore_params
from mgrpo_jax.training.paths import RunPaths, warm_start_folder
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup


@dataclasses.dataclass(frozen=True)
class Exported:
  """What `export_agent` wrote: the folder, the PEFT adapter folder (or None) and where
  the weights came from."""
  folder: pathlib.Path
  source: str
  step: int | None
  adapter: pathlib.Path | None = None


def _weights(trainer, paths: RunPaths, config, role: str, step: int | None):
  """(params, source folder, step or None) of the agent's newest checkpoint."""
  directory = paths.checkpoints(role)
  if "://" in directory or pathlib.Path(directory).is_dir():  # never create the folder
    with AgentCheckpointer(directory, trainer.layout) as checkpointer:
      steps = [t for t in checkpointer.all_steps() if step is None or t <= step]
      if steps:
        return checkpointer.restore(steps[-1])[0].params, directory, steps[-1]
  if step is not None:
    raise FileNotFoundError(f"no {role} checkpoint at step <= {step} in {directory}")
  warm = warm_start_folder(config, paths) / role
  if warm.is_dir():
    params, _ = restore_params(warm, trainer.layout.abstract.params)
    return params, str(warm), None
  raise FileNotFoundError(f"{role} has no checkpoint to export: neither RL checkpoints in "
                          f"{directory} nor a warm start in {warm}")


def export_agent(config, workdir: str | os.PathLike, role: str, out: str | os.PathLike, *,
                 step: int | None = None,
                 adapter_out: str | os.PathLike | None = None) -> Exported:
  """Writes agent `role`'s newest weights as a Hugging Face folder `out`, and its LoRA
  adapters as a PEFT folder `adapter_out` when given (module docstring).

  Raises:
    ValueError: `role` is not an agent with its own weights in the run's mode, or
      `adapter_out` is given for an agent without adapters.
    FileNotFoundError: the run holds no checkpoint of the agent (the message names the
      folders looked in).
  """
  mode = parse_mode(str(config.experiment.mode))
  if role not in mode.agents:
    raise ValueError(f"agent {role!r} has no weights of its own in experiment.mode="
                     f"{mode.name!r} (agents: {list(mode.agents)})")
  paths = RunPaths.from_config(config, os.fspath(workdir))
  setup = AgentSetup.from_config(config, role)
  model, tokenizer = agent_setup.build_model(
      setup, functools.partial(agent_setup.world_tokenizer, paths.local,
                               TokenizerSetup.from_config(config)))
  trainer = agent_setup.create_agent_state(model, setup)
  if adapter_out is not None and setup.lora is None:
    raise ValueError(f"{role} has no LoRA adapters to export ({role}.lora.rank is 0)")
  params, source, found = _weights(trainer, paths, config, role, step)
  model = trainer.layout.merge(params)
  template = tokenizer.chat_template or CHATML_TEMPLATE
  folder = export_hf_folder(model, tokenizer, out, chat_template=template)
  adapter = None
  if adapter_out is not None:
    adapter = save_peft_adapter(model, adapter_out,
                                _peft_base(model, tokenizer, setup.model.preset, adapter_out,
                                           template))
  return Exported(folder, source, found, adapter)


def _peft_base(model, tokenizer, preset: str, adapter_out, chat_template: str) -> str:
  """The base a PEFT adapter of a model of `preset` loads onto: its Hugging Face folder,
  or the frozen base written as one in `<adapter_out>/base` (a GGUF file or a downloaded
  preset)."""
  if pathlib.Path(preset).is_dir():
    return str(pathlib.Path(preset).resolve())
  folder = export_hf_folder(base_model(model), tokenizer, pathlib.Path(adapter_out) / "base",
                            chat_template=chat_template)
  return str(folder.resolve())
