"""`launch/export_hf.py`: an agent's checkpoint as a Hugging Face folder that transformers
runs to the framework's logits.

A run folder holds a checkpoint written by the framework's own checkpointer (tiny
models with perturbed weights, norms and key-smear logits included); the export is
loaded by transformers in the reference venv (`tests/support/hf_reference.py`,
float32, eager attention) and compared with the framework on the same token ids: the
logits of a batch with left padding (max |difference| < 1e-4), greedy generation
through transformers' KV cache against a framework loop, and the exported tokenizer
(ids of world texts, decoding back, the chat template's ids).
"""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.config import apply_overrides
from mgrpo_jax.text import render_chat
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.checkpoint import AgentCheckpointer
from mgrpo_jax.training.export import export_agent
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup, tokenizer_corpus
from tests.support import plumbing_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
NEW_TOKENS = 6
TOLERANCE = 1e-4

PLAIN = {}
SMEARED = {"world.render": "symbolic", "world.tokenizer_vocab_size": 1200,
           "main.model.smeared_keys": True}


def _checkpointed_run(tmp_path: pathlib.Path, overrides: dict):
  """(config, workdir, model, tokenizer): a run folder whose main checkpoint holds the
  returned model's weights (the seeded init plus noise on every parameter)."""
  config = plumbing_config.get_config()
  apply_overrides(config, overrides)
  workdir = tmp_path / "run"
  paths = RunPaths.from_config(config, str(workdir))
  setup = AgentSetup.from_config(config, "main")
  model, tokenizer = agent_setup.build_model(
      setup, functools.partial(agent_setup.world_tokenizer, paths.local,
                               TokenizerSetup.from_config(config)))
  trainer = agent_setup.create_agent_state(model, setup)
  leaves, treedef = jax.tree.flatten(trainer.state.params)
  keys = jax.random.split(jax.random.key(7), len(leaves))
  noisy = [x + 0.3 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=True)]
  state = trainer.state.replace(params=jax.tree.unflatten(treedef, noisy))
  with AgentCheckpointer(paths.checkpoints("main"), trainer.layout) as checkpointer:
    checkpointer.save(state, force=True)
  return config, workdir, nnx.merge(trainer.layout.graphdef, state.params), tokenizer


@nnx.jit
def _logits(model, ids, attention_mask=None):
  """The model's logits as one compiled program per shape: called eagerly, every op
  compiles anew at each length of the generation loop."""
  return model(ids, attention_mask=attention_mask)


def _reference(python: pathlib.Path, folder: pathlib.Path, request: dict, tmp_path):
  request_path, result_path = tmp_path / "request.json", tmp_path / "result.npz"
  request_path.write_text(json.dumps({"folder": str(folder), **request}))
  proc = subprocess.run([str(python), str(ROOT / "tests" / "support" / "hf_reference.py"),
                         str(request_path), str(result_path)],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = np.load(result_path)
  return result["logits"], result["generated"], json.loads(str(result["tokenizer"]))


def _compare(reference_python, tmp_path, config, model, tokenizer, folder):
  texts = tokenizer_corpus(TokenizerSetup.from_config(config))[:6] + [
      "Unicode beyond the corpus: \u00c5ngstr\u00f6m \u03a9 \u2211 \U0001f355 \t\n tabs",
      "<|im_start|>assistant\n<thinking>plan</thinking><tool_call>{}</tool_call><|im_end|>\n"]
  rows = [tokenizer.encode(texts[0])[:24], tokenizer.encode(texts[1])[:17]]
  pad = 24 - len(rows[1])
  ids = np.array([rows[0], [tokenizer.pad_id] * pad + rows[1]], np.int32)
  mask = np.array([[1] * 24, [0] * pad + [1] * len(rows[1])], np.int32)
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  messages = [{"role": "system", "content": "You are a research agent."},
              {"role": "user", "content": texts[2][:200]}]
  request = {"ids": ids.tolist(), "attention_mask": mask.tolist(),
             "positions": positions.tolist(), "generate_ids": rows[1],
             "new_tokens": NEW_TOKENS, "texts": texts, "messages": messages}
  logits, generated, text_results = _reference(reference_python, folder, request, tmp_path)

  want = np.asarray(_logits(model, ids, mask))
  real = mask.astype(bool)
  difference = float(np.max(np.abs(logits[real] - want[real])))
  assert difference < TOLERANCE, f"max |logit difference| {difference:.3g}"
  sequence = list(rows[1])
  for _ in range(NEW_TOKENS):
    sequence.append(int(np.argmax(np.asarray(_logits(model, np.array([sequence], np.int32)))[0, -1])))
  assert generated.tolist() == sequence[len(rows[1]):]
  assert text_results["encoded"] == [tokenizer.encode(text) for text in texts]
  assert text_results["decoded"] == texts
  assert text_results["chat"] == render_chat(tokenizer, messages,
                                             add_generation_prompt=True).ids.tolist()
  return difference


def test_plain_model_through_the_launcher(tmp_path, reference_python):
  config, workdir, model, tokenizer = _checkpointed_run(tmp_path, PLAIN)
  out = tmp_path / "export"
  proc = subprocess.run(
      [sys.executable, str(ROOT / "launch" / "export_hf.py"), f"--workdir={workdir}",
       "--agent=main", f"--out={out}",
       f"--config={ROOT / 'tests' / 'support' / 'plumbing_config.py'}"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "(step 0)" in proc.stdout
  hf_config = json.loads((out / "config.json").read_text())
  assert hf_config["architectures"] == ["LlamaForCausalLM"]
  assert not (out / "modeling_mgrpo.py").exists()
  _compare(reference_python, tmp_path, config, model, tokenizer, out)


def test_smeared_key_model_ships_its_modeling_file(tmp_path, reference_python):
  config, workdir, model, tokenizer = _checkpointed_run(tmp_path, SMEARED)
  smear = np.asarray(model.layers[0].attn.key_smear[...])
  assert np.all(np.abs(smear) > 1e-3), "the key-smear logits must be off their zero init"
  exported = export_agent(config, workdir, "main", tmp_path / "export")
  hf_config = json.loads((exported.folder / "config.json").read_text())
  assert hf_config["model_type"] == "mgrpo_llama"
  assert (exported.folder / "modeling_mgrpo.py").is_file()
  _compare(reference_python, tmp_path, config, model, tokenizer, exported.folder)


def test_missing_checkpoint_names_the_folders(tmp_path):
  config = plumbing_config.get_config()
  with pytest.raises(FileNotFoundError, match=r"checkpoints/main.*warm_start/main"):
    export_agent(config, tmp_path / "empty_run", "main", tmp_path / "out")
