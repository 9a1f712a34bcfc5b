r"""Exports one agent of a run as a Hugging Face folder (transformers, vLLM, SGLang).

  python launch/export_hf.py --workdir=runs/local_demo --agent=main --out=exports/main
  python launch/export_hf.py --workdir=runs/my_run --agent=sub --out=exports/sub --step=20
  python launch/export_hf.py --workdir=runs/lora_run --agent=main --out=exports/main \
      --adapter_out=exports/main_adapter

Writes config.json, model.safetensors (float32), generation_config.json, tokenizer.json
and tokenizer_config.json (with the chat template the agent was prompted with) of the
agent's newest RL checkpoint (with --step, the newest at or before it), or of its warm
start when RL has saved none (`mgrpo_jax/training/export.py`). Plain models are
Llama (Qwen2 with q/k/v biases) folders:

  AutoModelForCausalLM.from_pretrained("exports/main")

A model with smeared keys (`<agent>.model.smeared_keys`) is the `mgrpo_llama` type,
whose modeling file ships in the folder:

  AutoModelForCausalLM.from_pretrained("exports/main", trust_remote_code=True)

An agent trained with LoRA adapters (`<agent>.lora.rank` > 0) is written merged; with
--adapter_out its adapters are also written as a PEFT adapter folder, loaded onto its
base (the agent's Hugging Face folder, or `<adapter_out>/base` written for a GGUF base):

  PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), "exports/main_adapter")

The run's config is `<workdir>/launch/config.py` (written by --slice=all) unless
--config names one (the config the run was started with, same overrides). A bad flag,
a missing checkpoint or config exits with status 2 and one line naming it.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
from typing import NoReturn

from absl import app, flags
from ml_collections import config_flags

from mgrpo_jax.config import ConfigError, validate
from mgrpo_jax.utils import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's folder (--workdir of tpu_run.py).")
_AGENT = flags.DEFINE_enum("agent", "main", ["main", "sub"], "Which agent to export.")
_OUT = flags.DEFINE_string("out", None, "Output folder (created; files in it are replaced).")
_ADAPTER_OUT = flags.DEFINE_string("adapter_out", None, "Also write the agent's LoRA adapters "
                                   "as a PEFT adapter folder here.")
_STEP = flags.DEFINE_integer("step", None, "Export the newest RL checkpoint at or before this "
                             "step (default: the newest).", lower_bound=0)
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "The run's config ('path.py:arg', --config.<key>=<value> overrides); "
    "default: <workdir>/launch/config.py.", lock_config=True)


def _fail(message: str) -> NoReturn:
  sys.stderr.write(f"export_hf.py: error: {message}\n")
  sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  return cli.parse_flags(argv, _fail)


def _config():
  """The run's config: --config, else the launch config the run left in its folder."""
  if _CONFIG.value is None:
    path = pathlib.Path(_WORKDIR.value) / "launch" / "config.py"
    if not path.is_file():
      _fail(f"{path} not found: pass --config=<the run's config file> (and its overrides)")
    spec = importlib.util.spec_from_file_location("run_launch_config", path)
    module = importlib.util.module_from_spec(spec)
    try:
      spec.loader.exec_module(module)
      config = module.get_config()
    except Exception as e:  # a damaged launch file
      _fail(f"{path}: {type(e).__name__}: {e}")
  else:
    config = _CONFIG.value
  try:
    validate(config)
  except ConfigError as e:
    _fail(str(e))
  return config


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  for name, flag in (("workdir", _WORKDIR), ("out", _OUT)):
    if not flag.value:
      _fail(f"--{name} is required")
  config = _config()
  from mgrpo_jax.training.export import export_agent

  try:
    exported = export_agent(config, _WORKDIR.value, _AGENT.value, _OUT.value, step=_STEP.value,
                            adapter_out=_ADAPTER_OUT.value)
  except (FileNotFoundError, ValueError) as e:
    _fail(str(e))
  origin = exported.source + ("" if exported.step is None else f" (step {exported.step})")
  files = ", ".join(sorted(p.name for p in exported.folder.iterdir()))
  sys.stdout.write(f"exported {_AGENT.value} from {origin} to {os.fspath(exported.folder)}: "
                   f"{files}\n")
  if exported.adapter is not None:
    sys.stdout.write(f"PEFT adapter in {os.fspath(exported.adapter)}\n")


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
