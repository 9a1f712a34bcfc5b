"""Both agents with LoRA adapters through the whole pipeline (`--slice=all`): a warm
start, the held-out evaluation, 3 RL steps of the two slices over the real socket, the
evaluation after RL. The plumbing config's tiny models serve as the frozen bases
(bfloat16), each agent with rank-4 adapters on q, v and up.

Checked: the run ends; every checkpoint (RL and warm start) holds the adapters alone,
never a base weight; the RL steps moved the adapters (B left zero); the export writes
the merged model and a PEFT adapter folder.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.support.trainer_harness import acked_steps, checkpoint_arrays, launch

LORA = [f"--config.{role}.lora.{key}={value}" for role in ("main", "sub") for key, value in
        (("rank", 4), ("alpha", 8.0), ("targets", "q,v,up"), ("base_dtype", "bfloat16"))]
STAGES = ["--config.warm_start.enabled=true", "--config.warm_start.num_questions=24",
          "--config.warm_start.num_worlds=2", "--config.warm_start.epochs=1",
          "--config.eval.enabled=true", "--config.eval.num_questions=4",
          "--config.eval.samples=1"]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("lora") / "run"
  result = launch(workdir, *LORA, *STAGES, timeout=600)
  assert result.returncode == 0, result.stdout[-4000:]
  return workdir


def _only_adapters(names) -> bool:
  params = [n for n in names if "/params/" in n or n.startswith("params")]
  return bool(params) and all("lora_a" in n or "lora_b" in n for n in params)


def test_every_checkpoint_holds_the_adapters_alone(lora_run):
  assert acked_steps(lora_run, 3, "local_demo") == 3
  for role in ("main", "sub"):
    step, arrays = checkpoint_arrays(lora_run, role)
    assert step == 3 and _only_adapters(arrays), sorted(arrays)[:8]
    assert not any(name.endswith(("kernel", "embedding", "scale")) for name in arrays)
    moved = [a for name, a in arrays.items() if "/params/" in name and "lora_b" in name]
    assert len(moved) == 2 * 3 and all(np.abs(a).max() > 0 for a in moved)
    with ocp.CheckpointManager(lora_run / "warm_start" / role) as manager:
      warm = manager.restore(manager.latest_step(), args=ocp.args.Composite(
          params=ocp.args.StandardRestore())).params
    leaves = json.dumps(warm, default=lambda _: None)
    assert "lora_a" in leaves and "kernel" not in leaves and "embedding" not in leaves
  for label in ("warm_start", "final"):
    assert (lora_run / "eval" / f"{label}.json").is_file()


def test_export_writes_the_merged_model_and_the_peft_adapter(lora_run, tmp_path):
  from mgrpo_jax.config import apply_overrides
  from mgrpo_jax.training.export import export_agent
  from tests.support import plumbing_config

  config = plumbing_config.get_config()
  apply_overrides(config, {arg.split("=")[0].removeprefix("--config."): arg.split("=")[1]
                           for arg in LORA + STAGES})
  exported = export_agent(config, lora_run, "sub", tmp_path / "merged",
                          adapter_out=tmp_path / "adapter")
  adapter = json.loads((exported.adapter / "adapter_config.json").read_text())
  assert adapter["r"] == 4 and adapter["target_modules"] == ["q_proj", "up_proj", "v_proj"]
  assert pathlib.Path(adapter["base_model_name_or_path"]) == (tmp_path / "adapter" / "base")
  assert (exported.folder / "model.safetensors").is_file() and exported.step == 3
