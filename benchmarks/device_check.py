"""Accelerator check: train-step model FLOPs utilisation and decode throughput on one chip.

  bash benchmarks/device_check.sh              # a GPU/TPU host: venv, then this script
  .venv/bin/python benchmarks/device_check.py --smoke    # tiny shapes on CPU

Rows of the table (one device, random weights of each model's published shape):
  matmul  the peer: a chain of [M, M] x [M, M] bfloat16 matmuls in JAX, the dense
          throughput this device reaches in the same run.
  train   one `training.make_update_fn` step (forward, log-probs, clipped token loss,
          backward, global-norm clipping, AdamW), float32 parameters, `--dtype`
          activations, N x T tokens. Model FLOPs per step:
            6 * P_mm * N * T  +  12 * L * (N_heads * H) * T * N * T
          (P_mm = parameters that enter a matmul, the tied LM head included; the second
          term is attention scores and values, forward + backward, over the full T x T
          the implementation computes). MFU = model FLOP/s / the chip's spec bf16 peak;
          "of matmul" = model FLOP/s / the peer's.
  decode  `sampling.Sampler.generate`, greedy, B rows x G new tokens after a P-token
          prompt; tok/s = B * G / wall time (prefill included); GB/s = the bytes one
          decode step must read (float32 parameters + the average KV cache) x G / time.
Checks (the "check" column; the script exits 1 if one fails):
  train   the step's loss equals the loss of a separate forward pass on the same
          batch (within 2e-2 relative + 1e-3), and the step moved the parameters;
  decode  the sampler's log-probs of its tokens equal a teacher-forced forward pass
          over prompt + completion (max |diff| below 0.25 in bfloat16, 1e-3 in float32).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import numpy as np

# Spec dense bf16 FLOP/s and HBM bytes/s by `device_kind` (public data sheets).
CHIP_SPECS = {
    "NVIDIA H200": (989e12, 4.8e12),
    "NVIDIA H100 80GB HBM3": (989e12, 3.35e12),
    "NVIDIA A100-SXM4-80GB": (312e12, 2.04e12),
    "TPU v4": (275e12, 1.23e12),
    "TPU v5 lite": (197e12, 0.819e12),
    "TPU v5e": (197e12, 0.819e12),
    "TPU v5p": (459e12, 2.765e12),
    "TPU v5": (459e12, 2.765e12),
}


@dataclasses.dataclass(frozen=True)
class Sizes:
  """Shapes of one run."""

  models: tuple[str, ...]
  train_rows: int
  train_len: int
  decode_batch: int
  prompt_len: int
  new_tokens: int
  matmul: int
  repeats: int


FULL = Sizes(models=("smollm2_135m", "llama3_2_1b"), train_rows=8, train_len=1024,
             decode_batch=64, prompt_len=128, new_tokens=256, matmul=8192, repeats=5)
SMOKE = Sizes(models=("tiny",), train_rows=4, train_len=32, decode_batch=4, prompt_len=8,
              new_tokens=8, matmul=256, repeats=2)


def _median_time(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def matmul_peer(size: int, repeats: int) -> float:
  """FLOP/s of a chain of 8 bf16 [size, size] matmuls (the device's dense roofline)."""
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.key(0), (size, size), jnp.bfloat16) / np.sqrt(size)

  @jax.jit
  def chain(x):
    for _ in range(8):
      x = x @ a
    return x

  x = jnp.ones((size, size), jnp.bfloat16)
  chain(x).block_until_ready()
  seconds = _median_time(lambda: chain(x).block_until_ready(), repeats)
  return 8 * 2 * size**3 / seconds


def _matmul_params(config) -> int:
  """Parameters that enter a matmul (no norms or biases; a tied table counts once)."""
  d, h = config.hidden_size, config.head_dim
  q, kv = config.num_heads * h, config.num_kv_heads * h
  block = d * q + 2 * d * kv + q * d + 3 * d * config.intermediate_size
  return config.num_layers * block + config.vocab_size * d


def train_flops(config, rows: int, length: int) -> float:
  """Model FLOPs of one update step (module docstring)."""
  tokens = rows * length
  attention = 12 * config.num_layers * config.num_heads * config.head_dim * length * tokens
  return 6 * _matmul_params(config) * tokens + attention


def _train_batch(vocab: int, rows: int, length: int):
  from mgrpo_jax.training import TrainBatch

  rng = np.random.default_rng(0)
  mask = np.zeros((rows, length), np.float32)
  prompt = length // 4
  for i in range(rows):
    mask[i, prompt:length - (i % 4) * (length // 16)] = 1.0
  return TrainBatch(
      ids=rng.integers(0, vocab, (rows, length)).astype(np.int32), loss_mask=mask,
      old_logp=(-np.log(vocab) + 0.05 * rng.standard_normal((rows, length))).astype(
          np.float32),
      advantages=rng.standard_normal(rows).astype(np.float32),
      weights=np.ones(rows, np.float32))


def check_train(name: str, dtype: str, sizes: Sizes) -> dict:
  """Times the update step; checks its loss against a separate forward pass."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from mgrpo_jax.core.losses import policy_loss
  from mgrpo_jax.models import get_config, init_model, token_logprobs
  from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
  )

  config = get_config(name, dtype=getattr(jnp, dtype))
  rows, length = sizes.train_rows, sizes.train_len
  batch = _train_batch(config.vocab_size, rows, length)
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(init_model(config, seed=0),
                                     make_optimizer(OptimizerConfig(learning_rate=1e-5)),
                                     mesh, seed=0)

  @nnx.jit
  def forward_loss(model, b):
    logp = token_logprobs(model, b.ids)
    return policy_loss(logp, b.old_logp, b.advantages, b.loss_mask, weights=b.weights)[0]

  expected = float(forward_loss(layout.model(state), batch))
  before = np.asarray(jax.tree.leaves(state.params)[0], np.float32).copy()
  update = make_update_fn(layout, UpdateConfig(), rows)
  start = time.perf_counter()
  state, metrics = update(state, batch)
  loss = float(metrics["loss"])
  compile_s = time.perf_counter() - start
  moved = float(np.max(np.abs(np.asarray(jax.tree.leaves(state.params)[0]) - before)))
  holder = {"state": state}

  def step():
    holder["state"], m = update(holder["state"], batch)
    m["loss"].block_until_ready()

  seconds = _median_time(step, sizes.repeats)
  ok = np.isfinite(loss) and abs(loss - expected) <= 2e-2 * abs(expected) + 1e-3 \
      and moved > 0
  return {"model": name, "what": f"train {rows}x{length}", "seconds": seconds,
          "compile_s": compile_s, "tokens_per_s": rows * length / seconds,
          "flops": train_flops(config, rows, length) / seconds,
          "check": f"loss {loss:.4f} vs {expected:.4f}", "ok": bool(ok)}


def check_decode(name: str, dtype: str, sizes: Sizes) -> dict:
  """Times greedy decoding; checks the sampler's log-probs against a full forward."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from mgrpo_jax.models import get_config, init_model, token_logprobs
  from mgrpo_jax.sampling import Sampler, SamplingParams

  config = get_config(name, dtype=getattr(jnp, dtype))
  model = init_model(config, seed=0)
  b, p, g = sizes.decode_batch, sizes.prompt_len, sizes.new_tokens
  prompts = np.random.default_rng(1).integers(0, config.vocab_size, (b, p)).tolist()
  sampler = Sampler(model, eos_ids=(), pad_id=0)
  params = SamplingParams(max_new_tokens=g, temperature=0.0, stop_on_eos=False)
  key = jax.random.key(0)
  start = time.perf_counter()
  out = sampler.generate(prompts, params, key)
  compile_s = time.perf_counter() - start
  seconds = _median_time(lambda: sampler.generate(prompts, params, key), sizes.repeats)

  full = np.concatenate([np.asarray(prompts, np.int32), out.tokens], axis=1)
  teacher = np.asarray(nnx.jit(token_logprobs)(model, full))[:, p:]
  diff = float(np.max(np.abs(teacher - out.logprobs)))
  tolerance = 1e-3 if dtype == "float32" else 0.25
  param_bytes = config.num_params * 4
  kv_bytes = (2 * config.num_layers * config.num_kv_heads * config.head_dim * b
              * (p + g / 2) * jnp.dtype(dtype).itemsize)
  return {"model": name, "what": f"decode {b}x{g} (prompt {p})", "seconds": seconds,
          "compile_s": compile_s, "tokens_per_s": b * g / seconds,
          "bytes": (param_bytes + kv_bytes) * g / seconds,
          "check": f"max abs dlogp {diff:.2e}", "ok": diff < tolerance}


def format_table(rows: list[dict], peer_flops: float, device_kind: str) -> str:
  peak_flops, peak_bytes = CHIP_SPECS.get(device_kind, (None, None))
  lines = [f"device: {device_kind}; matmul peer (bf16, same run): "
           f"{peer_flops / 1e12:.1f} TFLOP/s"
           + (f" = {peer_flops / peak_flops:.0%} of the {peak_flops / 1e12:.0f} TFLOP/s spec"
              if peak_flops else ""),
           "",
           "| model | what | step s | compile s | tok/s | TFLOP/s | MFU | of matmul | GB/s "
           "| check |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    flops = r.get("flops")
    tflops = f"{flops / 1e12:.2f}" if flops else ""
    mfu = f"{flops / peak_flops:.1%}" if flops and peak_flops else ""
    of_peer = f"{flops / peer_flops:.1%}" if flops else ""
    gbs = f"{r['bytes'] / 1e9:.0f}" if r.get("bytes") else ""
    if r.get("bytes") and peak_bytes:
      gbs += f" ({r['bytes'] / peak_bytes:.0%})"
    status = "ok" if r["ok"] else "FAILED"
    lines.append(f"| {r['model']} | {r['what']} | {r['seconds']:.4f} | {r['compile_s']:.1f} "
                 f"| {r['tokens_per_s']:,.0f} | {tflops} | {mfu} | {of_peer} | {gbs} "
                 f"| {status}: {r['check']} |")
  return "\n".join(lines)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="tiny shapes, float32, CPU-friendly (a test of this script)")
  parser.add_argument("--models", default="", help="comma-separated presets to run")
  parser.add_argument("--dtype", default="", choices=("", "float32", "bfloat16"),
                      help="activation dtype (default bfloat16; float32 with --smoke)")
  parser.add_argument("--out", default="", help="also write the table to this file")
  args = parser.parse_args(argv)
  sizes = SMOKE if args.smoke else FULL
  if args.models:
    sizes = dataclasses.replace(sizes, models=tuple(args.models.split(",")))
  dtype = args.dtype or ("float32" if args.smoke else "bfloat16")

  import jax

  device = jax.devices()[0]
  peer = matmul_peer(sizes.matmul, sizes.repeats)
  rows = []
  for name in sizes.models:
    rows.append(check_train(name, dtype, sizes))
    rows.append(check_decode(name, dtype, sizes))
  table = format_table(rows, peer, device.device_kind)
  sys.stdout.write(f"jax {jax.__version__}, backend {jax.default_backend()}, "
                   f"activations {dtype}\n{table}\n")
  if args.out:
    with open(args.out, "w") as f:
      f.write(table + "\n")
  return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
