"""A second command, in another workdir of the same parent folder, loads the programs the
first compiled: two processes each set the cache as `launch/tpu_run.py` does
(`enable_compilation_cache` with the default `experiment.compilation_cache_dir`) and run
one update of a tiny LoRA agent; JAX reports every program of the second as a
persistent-cache hit and none as a miss, and both give the same loss."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMAND = """
import json, sys
import jax, numpy as np
from jax import monitoring
from mgrpo_jax.config import base_config
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.lora import with_lora
from mgrpo_jax.training import (MeshConfig, OptimizerConfig, TrainBatch, UpdateConfig,
                                create_mesh, create_train_state, make_optimizer, make_update_fn)
from mgrpo_jax.training.compilation_cache import enable_compilation_cache

events = []
monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
folder = enable_compilation_cache(base_config(), sys.argv[1])
model = with_lora(init_model(get_config("tiny"), seed=0), LoraConfig(4, 8.0), seed=0)
state, layout = create_train_state(model, make_optimizer(OptimizerConfig()),
                                   create_mesh(MeshConfig(), jax.devices()[:1]), seed=0)
rng = np.random.default_rng(0)
batch = TrainBatch(ids=rng.integers(0, 256, (4, 32)).astype(np.int32),
                   loss_mask=np.ones((4, 32), np.float32), old_logp=np.full((4, 32), -5.5, np.float32),
                   advantages=np.array([1, -1, 0.5, -0.5], np.float32), weights=np.ones(4, np.float32))
state, metrics = make_update_fn(layout, UpdateConfig(), 4)(state, batch)
print(json.dumps({"folder": folder, "loss": float(metrics["loss"]),
                  "hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses")}))
"""


def _command(workdir: pathlib.Path) -> dict:
  # Without the test run's own cache settings (JAX_COMPILATION_CACHE_DIR, ...): the
  # default must find the folder.
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
  proc = subprocess.run([sys.executable, "-c", COMMAND, str(workdir)], capture_output=True,
                        text=True, check=False, cwd=ROOT, env={**env, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_command_in_another_workdir_loads_the_first_ones_programs(tmp_path):
  first = _command(tmp_path / "runs" / "full_run")
  second = _command(tmp_path / "runs" / "lora_run")
  assert first["folder"] == second["folder"] == str(tmp_path / "runs" / "jax_cache")
  assert first["misses"] >= 2 and first["hits"] == 0
  assert second["hits"] == first["misses"] and second["misses"] == 0
  assert second["loss"] == first["loss"]
