"""SmolLM2-135M float32 on CPU: the project's sampler and forward vs transformers `generate`.

Measures, on the same dequantized GGUF weights and the same prompts (greedy, EOS
ignored, 128 new tokens, left-padded batches of chat prompts of different lengths):
  - decode throughput (generated tokens/s) at batch 8 and 32, for mgrpo_jax's jitted
    sampler and for transformers `generate` (run in a subprocess with `.venv-ref`,
    created by tools/make_reference_venv.sh if missing);
  - the ratio mgrpo_jax / transformers (goal >= 1.5);
  - forward throughput at 8 x 256 and the compile times.
Each timing is the best of `--repeats` runs after a warm-up (compile) run.

  .venv/bin/python benchmarks/model.py [--repeats 2] [--batches 8,32]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NEW_TOKENS = 128
QUESTIONS = [
    "What is the capital of France?", "Explain photosynthesis in two sentences.",
    "Write a haiku about the sea.", "List three prime numbers larger than 50.",
    "How do vaccines work?", "Give me a recipe for pancakes.",
    "Why is the sky blue? Answer briefly, in plain words for a child.", "Define entropy.",
    "Summarize the plot of Romeo and Juliet.", "What does a CPU cache do?",
    "Translate 'good morning' into Spanish and German.", "Name the planets of the solar system.",
    "What is 17 times 23?", "Describe a cat to someone who has never seen one.",
    "What causes tides?", "Suggest a name for a bakery.",
]


def chat_prompts(tokenizer, count: int) -> list[list[int]]:
  """`count` ChatML prompts (SmolLM2's default system message) of different lengths."""
  system = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n")
  prompts = []
  for i in range(count):
    question = QUESTIONS[i % len(QUESTIONS)] + (" Be concise." if i >= len(QUESTIONS) else "")
    text = f"{system}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    prompts.append(tokenizer.encode(text))
  return prompts


def run_transformers_peer(gguf_path: str, prompts_file: str, batches: list[int],
                          repeats: int) -> dict:
  """transformers `generate` on the GGUF weights (runs under .venv-ref)."""
  import torch
  from transformers import AutoModelForCausalLM

  prompts = json.loads(pathlib.Path(prompts_file).read_text())
  path = pathlib.Path(gguf_path)
  start = time.perf_counter()
  model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                               dtype=torch.float32)
  model.eval()
  model.generation_config.eos_token_id = None
  load_s = time.perf_counter() - start
  results = {"load_s": load_s, "threads": torch.get_num_threads(), "decode": {},
             "tokens": {}}
  for batch in batches:
    rows = prompts[:batch]
    width = max(len(r) for r in rows)
    ids = torch.full((batch, width), 2, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, r in enumerate(rows):
      ids[i, width - len(r):] = torch.tensor(r)
      mask[i, width - len(r):] = 1
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=2)
      times.append(time.perf_counter() - start)
    results["decode"][str(batch)] = min(times)
    results["tokens"][str(batch)] = out[:, width:].tolist()
  return results


def peer_results(gguf_path: pathlib.Path, prompts: list[list[int]], batches: list[int],
                 repeats: int) -> dict:
  """Runs `run_transformers_peer` in a subprocess with the reference venv."""
  python = REPO_ROOT / ".venv-ref" / "bin" / "python"
  if not python.exists():
    subprocess.run(["bash", str(REPO_ROOT / "tools" / "make_reference_venv.sh")], check=True)
  with tempfile.TemporaryDirectory() as tmp:
    prompts_file, out_file = pathlib.Path(tmp) / "prompts.json", pathlib.Path(tmp) / "out.json"
    prompts_file.write_text(json.dumps(prompts))
    subprocess.run([str(python), __file__, "--peer", "--gguf", str(gguf_path),
                    "--prompts-file", str(prompts_file), "--out", str(out_file),
                    "--batches", ",".join(map(str, batches)), "--repeats", str(repeats)],
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads(out_file.read_text())


def run_jax(model, tokenizer, prompts: list[list[int]], batches: list[int],
            repeats: int) -> dict:
  """mgrpo_jax sampler decode and forward timings."""
  import jax
  import numpy as np
  from flax import nnx

  from mgrpo_jax.sampling import Sampler, SamplingParams
  from mgrpo_jax.utils.compile_counter import CompileCounter

  sampler = Sampler(model, tokenizer)
  params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0, stop_on_eos=False)
  results = {"decode": {}, "decode_compile_s": {}, "tokens": {}, "recompiles": 0}
  key = jax.random.key(0)
  for batch in batches:
    rows = prompts[:batch]
    start = time.perf_counter()
    sampler.generate(rows, params, key)
    results["decode_compile_s"][str(batch)] = time.perf_counter() - start
    times = []
    with CompileCounter() as counter:
      for _ in range(repeats):
        start = time.perf_counter()
        out = sampler.generate(rows, params, key)
        times.append(time.perf_counter() - start)
    results["recompiles"] += counter.count
    results["decode"][str(batch)] = min(times)
    results["tokens"][str(batch)] = out.tokens.tolist()
  results["programs"] = sampler.num_programs

  forward = nnx.jit(lambda m, x: m(x))
  ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (8, 256)).astype(np.int32)
  start = time.perf_counter()
  jax.block_until_ready(forward(model, ids))
  results["forward_compile_s"] = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(forward(model, ids))
    times.append(time.perf_counter() - start)
  results["forward_s"] = min(times)
  return results


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--batches", default="8,32")
  parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--gguf", help=argparse.SUPPRESS)
  parser.add_argument("--prompts-file", help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  batches = [int(b) for b in args.batches.split(",")]
  if args.peer:
    result = run_transformers_peer(args.gguf, args.prompts_file, batches, args.repeats)
    pathlib.Path(args.out).write_text(json.dumps(result))
    return

  sys.path.insert(0, str(REPO_ROOT))
  from mgrpo_jax.models import load_pretrained
  from mgrpo_jax.models.weights.fetch import fetch_smollm2_gguf

  gguf_path = fetch_smollm2_gguf()
  start = time.perf_counter()
  model, tokenizer = load_pretrained(gguf_path)
  load_s = time.perf_counter() - start
  prompts = chat_prompts(tokenizer, max(batches))
  ours = run_jax(model, tokenizer, prompts, batches, args.repeats)
  peer = peer_results(gguf_path, prompts, batches, args.repeats)

  print(f"SmolLM2-135M-Instruct f32, CPU: {os.cpu_count()} cores (shared with other jobs), "
        f"torch threads {peer['threads']}; greedy, EOS ignored, {NEW_TOKENS} new tokens; "
        f"prompt lengths {min(map(len, prompts))}-{max(map(len, prompts))}")
  print(f"load: mgrpo_jax {load_s:.1f} s, transformers {peer['load_s']:.1f} s")
  print(f"{'what':<26}{'mgrpo_jax':>14}{'transformers':>16}{'ratio':>8}{'same tokens':>13}")
  for batch in batches:
    b = str(batch)
    ours_tps = batch * NEW_TOKENS / ours["decode"][b]
    peer_tps = batch * NEW_TOKENS / peer["decode"][b]
    same = sum(a == p for a, p in zip(ours["tokens"][b], peer["tokens"][b], strict=True))
    print(f"{f'decode tok/s, batch {batch}':<26}{ours_tps:>14.1f}{peer_tps:>16.1f}"
          f"{ours_tps / peer_tps:>7.2f}x{f'{same}/{batch} rows':>13}")
  print(f"{'forward tok/s, 8x256':<26}{8 * 256 / ours['forward_s']:>14.1f}")
  for batch in batches:
    print(f"{f'decode compile+run, b{batch}':<26}{ours['decode_compile_s'][str(batch)]:>13.1f}s")
  print(f"{'forward compile+run':<26}{ours['forward_compile_s']:>13.1f}s")
  print(f"sampler programs compiled: {ours['programs']}; recompilations in timed runs: "
        f"{ours['recompiles']}")


if __name__ == "__main__":
  main()
