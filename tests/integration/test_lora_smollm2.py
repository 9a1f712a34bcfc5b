"""A SmolLM2-135M-Instruct agent with rank-16 LoRA adapters on every projection (the real
GGUF weights): its checkpoint holds the adapters alone, at most 5% of a full
fine-tuning checkpoint, and `export_agent` writes a PEFT adapter folder that `peft`
loads onto the base in transformers, and a merged folder, both giving our logits.

The adapters and their AdamW moments are drawn at random (B is zero after `with_lora`,
which would hide a wrong scale or transpose, and orbax does not write arrays of zeros,
which would hide the moments of a step-0 state) and saved by the agent's own
checkpointer; the export reads them back from the run folder like `launch/export_hf.py`.
"""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.config import apply_overrides
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.lora import base_model
from mgrpo_jax.scale.planner import abstract_mesh, abstract_train_state, tree_bytes_per_device
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.checkpoint import AgentCheckpointer
from mgrpo_jax.training.export import export_agent
from mgrpo_jax.training.mesh import MeshConfig
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from tests.support import plumbing_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # PEFT computes x W + s (x A) B, as we do
# The merged folder rounds W + s A B to float32 once per weight: SmolLM2's logits (up to
# about 40) then move by up to 1e-4 (1.0e-4 measured).
MERGED_TOLERANCE = 3e-4
LORA = {"main.model.preset": "smollm2_135m", "main.lora.rank": 16, "main.lora.alpha": 32.0}
forward = nnx.jit(lambda model, ids, mask: model(ids, attention_mask=mask))


@pytest.fixture(scope="module")
def lora_run(smollm2_gguf, tmp_path_factory):
  """(config, workdir, the agent's model with random adapters, tokenizer, its state)."""
  del smollm2_gguf  # fetched: build_model finds it in the cache
  config = plumbing_config.get_config()
  apply_overrides(config, LORA)
  workdir = tmp_path_factory.mktemp("lora_run")
  paths = RunPaths.from_config(config, str(workdir))
  setup = AgentSetup.from_config(config, "main")
  model, tokenizer = agent_setup.build_model(
      setup, functools.partial(agent_setup.world_tokenizer, paths.local,
                               TokenizerSetup.from_config(config)))
  trainer = agent_setup.create_agent_state(model, setup)
  leaves, treedef = jax.tree.flatten((trainer.state.params, trainer.state.opt_state))
  keys = jax.random.split(jax.random.key(3), len(leaves))
  noisy = [x + 0.02 * jax.random.normal(k, x.shape, x.dtype) if x.ndim else x
           for x, k in zip(leaves, keys, strict=True)]
  params, opt_state = jax.tree.unflatten(treedef, noisy)
  state = trainer.state.replace(params=params, opt_state=opt_state)
  with AgentCheckpointer(paths.checkpoints("main"), trainer.layout) as checkpointer:
    checkpointer.save(state, force=True)
  return config, workdir, trainer.layout.model(state), tokenizer, paths


def test_checkpoint_is_at_most_5_percent_of_full_fine_tuning(lora_run):
  config, _, model, _, paths = lora_run
  folder = pathlib.Path(paths.checkpoints("main")) / "0"
  lora_bytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
  optim = OptimizerConfig.from_config(config.main.optim, total_steps=3)
  full = abstract_train_state(model.config.replace(lora=None), make_optimizer(optim),
                              abstract_mesh(MeshConfig()))
  full_bytes = tree_bytes_per_device(full)  # params, AdamW mu and nu, step, PRNG key
  assert model.config.lora == LoraConfig(rank=16, alpha=32.0)
  assert lora_bytes <= 0.05 * full_bytes, (lora_bytes, full_bytes)
  assert lora_bytes >= 0.03 * full_bytes  # the adapters and both moments are in it


def _reference(python, requests, tmp_path):
  path = tmp_path / "requests.json"
  path.write_text(json.dumps(requests))
  proc = subprocess.run([str(python), str(ROOT / "tests" / "support" / "hf_reference.py"),
                         str(path)], capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]


def test_peft_adapter_and_merged_export_give_our_logits(lora_run, reference_python, tmp_path):
  config, workdir, model, tokenizer, _ = lora_run
  exported = export_agent(config, workdir, "main", tmp_path / "merged",
                          adapter_out=tmp_path / "adapter")
  adapter_config = json.loads((exported.adapter / "adapter_config.json").read_text())
  assert adapter_config["r"] == 16 and adapter_config["lora_alpha"] == 32.0
  assert len(adapter_config["target_modules"]) == 7
  base = adapter_config["base_model_name_or_path"]
  assert base == str((tmp_path / "adapter" / "base").resolve())

  rows = [tokenizer.encode("The capital of France is"), tokenizer.encode("Who founded it?")]
  width = max(map(len, rows))
  ids = np.full((2, width), tokenizer.pad_id, np.int32)
  mask = np.zeros((2, width), np.int32)
  for i, row in enumerate(rows):
    ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
  common = {"ids": ids.tolist(), "attention_mask": mask.tolist(),
            "positions": np.maximum(np.cumsum(mask, 1) - 1, 0).tolist(),
            "generate_ids": rows[0], "new_tokens": 4, "texts": ["Hello"],
            "messages": [{"role": "user", "content": "Hi"}], "trust_remote_code": False}
  requests = [{**common, "folder": base, "peft_adapter": str(exported.adapter),
               "result": str(tmp_path / "peft.npz")},
              {**common, "folder": str(exported.folder), "result": str(tmp_path / "merged.npz")}]
  _reference(reference_python, requests, tmp_path)
  ours = np.asarray(forward(model, ids, mask))
  real = mask.astype(bool)
  for name, tolerance in (("peft", TOLERANCE), ("merged", MERGED_TOLERANCE)):
    theirs = np.load(tmp_path / f"{name}.npz")
    assert str(theirs["architecture"]) == "LlamaForCausalLM"
    difference = float(np.max(np.abs(theirs["logits"][real] - ours[real])))
    assert difference <= tolerance, f"{name}: max |logit difference| {difference:.3g}"
  plain = np.asarray(forward(base_model(model), ids, mask))
  assert np.abs(plain[real] - ours[real]).max() > 100 * TOLERANCE  # the adapters matter
