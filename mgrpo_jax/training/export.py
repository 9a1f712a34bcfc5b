"""One agent of a run as a Hugging Face folder (`launch/export_hf.py`).

`export_agent(config, workdir, role, out)` rebuilds the agent's model and tokenizer from
the run's config (`agent_setup.build_model`: the same shape, vocabulary and chat
template as in training), loads the weights of its newest RL checkpoint
(`<workdir>/checkpoints/<role>`, or with `step` the newest at or before it), or, when
RL has saved none, its warm start's parameter checkpoint, and writes them with
`models.weights.hf_export.export_hf_folder`: config.json, model.safetensors, the
tokenizer files and the chat template (the model's own, else ChatML), plus the modeling
file of a smeared-key model.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from flax import nnx

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.models.weights.hf_export import export_hf_folder
from mgrpo_jax.text import CHATML_TEMPLATE
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.checkpoint import AgentCheckpointer, restore_params
from mgrpo_jax.training.paths import RunPaths, warm_start_folder


@dataclasses.dataclass(frozen=True)
class Exported:
  """What `export_agent` wrote: the folder and where its weights came from."""
  folder: pathlib.Path
  source: str
  step: int | None


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
                 step: int | None = None) -> Exported:
  """Writes agent `role`'s newest weights as a Hugging Face folder `out` (module docstring).

  Raises:
    ValueError: `role` is not an agent with its own weights in the run's mode.
    FileNotFoundError: the run holds no checkpoint of the agent (the message names the
      folders looked in).
  """
  mode = parse_mode(str(config.experiment.mode))
  if role not in mode.agents:
    raise ValueError(f"agent {role!r} has no weights of its own in experiment.mode="
                     f"{mode.name!r} (agents: {list(mode.agents)})")
  paths = RunPaths.from_config(config, os.fspath(workdir))
  model, tokenizer = agent_setup.build_model(config[role], role, paths.local, config)
  trainer = agent_setup.create_agent_state(model, config[role], role, config)
  params, source, found = _weights(trainer, paths, config, role, step)
  model = nnx.merge(trainer.layout.graphdef, params)
  folder = export_hf_folder(model, tokenizer, out,
                            chat_template=tokenizer.chat_template or CHATML_TEMPLATE)
  return Exported(folder, source, found)
