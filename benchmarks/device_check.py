"""Accelerator check: train-step model FLOPs utilisation and decode throughput on one chip.

  bash benchmarks/device_check.sh              # a GPU/TPU host: venv, then this script
  .venv/bin/python benchmarks/device_check.py --smoke    # tiny shapes on CPU

Rows of the table (one device, random weights of each model's published shape):
  matmul  the peer: a chain of [M, M] x [M, M] bfloat16 matmuls in JAX, the dense
          throughput this device reaches in the same run.
  train   one `training.make_update_fn` step (forward, log-probs, clipped token loss,
          backward, global-norm clipping, AdamW), float32 parameters, `--dtype`
          activations, N x T tokens; the attention kernel (`ModelConfig.attention`),
          per-block rematerialization (`UpdateConfig.remat`) and micro-batch rows are
          named in the "what" column when not the defaults (auto, none, whole batch).
          Model FLOPs per step:
            6 * P_mm * N * T  +  12 * L * (N_heads * H) * T * N * T
          (P_mm = parameters that enter a matmul, the tied LM head included; the second
          term is attention scores and values, forward + backward, over the full T x T).
          MFU = model FLOP/s / the chip's spec bf16 peak; "of matmul" = model FLOP/s /
          the peer's.
  memory  the same update on scanned layers, each case in a fresh process run before
          this one touches the device, so "peak GiB" is the allocator's peak for that
          update alone (parameters, AdamW state, batch and the step's temporaries);
          empty on a backend without allocator statistics (CPU).
  decode  `sampling.Sampler.generate`, greedy, B rows x G new tokens after a P-token
          prompt; tok/s = B * G / wall time (prefill included); GB/s = the bytes one
          decode step must read (float32 parameters + the average KV cache) x G / time.
Checks (the "check" column; the script exits 1 if one fails):
  train   the step's loss equals the loss of a separate forward pass on the same
          batch (within 2e-2 relative + 1e-3), and the step moved the parameters;
  memory  the loss is finite and the parameters moved;
  decode  the sampler's log-probs of its tokens equal a teacher-forced forward pass
          over prompt + completion (max |diff| below 0.25 in bfloat16, 1e-3 in float32).
A row whose run raises is reported FAILED with the error's first line; the rest still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

import numpy as np
from bench_timing import median_seconds

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
class TrainCase:
  """One update step to time (or, in `Sizes.memory`, to measure the peak memory of)."""

  model: str
  rows: int
  length: int
  attention: str = "auto"
  remat: str = "none"
  micro_batch: int = 0

  def label(self) -> str:
    extras = [f"attention {self.attention}" if self.attention != "auto" else "",
              f"remat {self.remat}" if self.remat != "none" else "",
              f"micro-batch {self.micro_batch}" if self.micro_batch else ""]
    extra = ", ".join(e for e in extras if e)
    return f"train {self.rows}x{self.length}" + (f" ({extra})" if extra else "")

  def encode(self) -> str:
    return ":".join(str(v) for v in dataclasses.astuple(self))

  @classmethod
  def decode(cls, text: str) -> TrainCase:
    model, rows, length, attention, remat, micro = text.split(":")
    return cls(model, int(rows), int(length), attention, remat, int(micro))


@dataclasses.dataclass(frozen=True)
class Sizes:
  """Shapes of one run."""

  decode_models: tuple[str, ...]
  train: tuple[TrainCase, ...]
  memory: tuple[TrainCase, ...]
  decode_batch: int
  prompt_len: int
  new_tokens: int
  matmul: int
  repeats: int


FULL = Sizes(
    decode_models=("smollm2_135m", "llama3_2_1b"),
    train=(TrainCase("smollm2_135m", 8, 1024),
           TrainCase("llama3_2_1b", 8, 1024),
           TrainCase("llama3_2_1b", 8, 1024, attention="xla"),
           TrainCase("llama3_2_1b", 16, 2048)),
    # SmolLM2's update at the config's 4096-token context, one row per micro-batch.
    memory=(*(TrainCase("smollm2_135m", 16, 4096, remat=r, micro_batch=1)
              for r in ("none", "dots", "full")),
            TrainCase("smollm2_135m", 16, 4096, attention="xla", remat="full",
                      micro_batch=1)),
    decode_batch=64, prompt_len=128, new_tokens=256, matmul=8192, repeats=5)
SMOKE = Sizes(decode_models=("tiny",),
              train=(TrainCase("tiny", 4, 32), TrainCase("tiny", 4, 32, attention="xla")),
              memory=(TrainCase("tiny", 4, 32, remat="full", micro_batch=2),),
              decode_batch=4, prompt_len=8, new_tokens=8, matmul=256, repeats=2)


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
  seconds = median_seconds(lambda: chain(x).block_until_ready(), repeats)
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


def _run_update(case: TrainCase, dtype: str, repeats: int, *, scan_layers: bool,
                reference_loss: bool) -> dict:
  """Builds the case's train state; returns its first loss, compile and step seconds."""
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

  config = get_config(case.model, dtype=getattr(jnp, dtype), attention=case.attention,
                      scan_layers=scan_layers)
  batch = _train_batch(config.vocab_size, case.rows, case.length)
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(init_model(config, seed=0),
                                     make_optimizer(OptimizerConfig(learning_rate=1e-5)),
                                     mesh, seed=0)
  expected = None
  if reference_loss:
    @nnx.jit
    def forward_loss(model, b):
      logp = token_logprobs(model, b.ids)
      return policy_loss(logp, b.old_logp, b.advantages, b.loss_mask, weights=b.weights)[0]

    expected = float(forward_loss(layout.model(state), batch))
  before = np.asarray(jax.tree.leaves(state.params)[0], np.float32).copy()
  update = make_update_fn(layout, UpdateConfig(remat=case.remat,
                                               micro_batch_size=case.micro_batch),
                          case.rows)
  start = time.perf_counter()
  state, metrics = update(state, batch)
  loss = float(metrics["loss"])
  compile_s = time.perf_counter() - start
  moved = float(np.max(np.abs(np.asarray(jax.tree.leaves(state.params)[0]) - before)))
  holder = {"state": state}

  def step():
    holder["state"], m = update(holder["state"], batch)
    m["loss"].block_until_ready()

  seconds = median_seconds(step, repeats)
  return {"config": config, "loss": loss, "expected": expected, "moved": moved,
          "compile_s": compile_s, "seconds": seconds}


def check_train(case: TrainCase, dtype: str, repeats: int) -> dict:
  """Times the update step; checks its loss against a separate forward pass."""
  r = _run_update(case, dtype, repeats, scan_layers=False, reference_loss=True)
  loss, expected = r["loss"], r["expected"]
  ok = np.isfinite(loss) and abs(loss - expected) <= 2e-2 * abs(expected) + 1e-3 \
      and r["moved"] > 0
  return {"model": case.model, "what": case.label(), "seconds": r["seconds"],
          "compile_s": r["compile_s"], "tokens_per_s": case.rows * case.length / r["seconds"],
          "flops": train_flops(r["config"], case.rows, case.length) / r["seconds"],
          "check": f"loss {loss:.4f} vs {expected:.4f}", "ok": bool(ok)}


def memory_case(case: TrainCase, dtype: str, repeats: int) -> dict:
  """One update on scanned layers; the device allocator's peak bytes (None on CPU)."""
  import jax

  r = _run_update(case, dtype, repeats, scan_layers=True, reference_loss=False)
  stats = jax.devices()[0].memory_stats() or {}
  ok = bool(np.isfinite(r["loss"]) and r["moved"] > 0)
  return {"model": case.model, "what": case.label() + ", scanned layers",
          "seconds": r["seconds"], "compile_s": r["compile_s"],
          "tokens_per_s": case.rows * case.length / r["seconds"],
          "peak_bytes": stats.get("peak_bytes_in_use"),
          "check": f"loss {r['loss']:.4f}", "ok": ok}


def check_memory(case: TrainCase, dtype: str, repeats: int) -> dict:
  """Runs `memory_case` in a fresh process (its own allocator, so its own peak)."""
  command = [sys.executable, __file__, "--memory-case", case.encode(), "--dtype", dtype,
             "--repeats", str(repeats)]
  proc = subprocess.run(command, capture_output=True, text=True)
  lines = proc.stdout.strip().splitlines()
  if proc.returncode or not lines:
    raise RuntimeError(f"memory case exited {proc.returncode}: "
                       + _first_error_line(proc.stderr))
  return json.loads(lines[-1])


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
  seconds = median_seconds(lambda: sampler.generate(prompts, params, key), sizes.repeats)

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


def _first_error_line(text: str) -> str:
  lines = [line for line in text.strip().splitlines() if line.strip()]
  errors = [line for line in lines if "Error" in line or "error" in line]
  return (errors or lines or ["(no output)"])[-1][:300]


def guarded(model: str, what: str, fn, *args) -> dict:
  """fn(*args), or a FAILED row naming the error when it raises."""
  try:
    return fn(*args)
  except Exception as e:  # noqa: BLE001 - one broken row must not hide the others
    return {"model": model, "what": what, "ok": False,
            "check": f"{type(e).__name__}: {_first_error_line(str(e))}"}


def format_table(rows: list[dict], peer_flops: float, device_kind: str) -> str:
  peak_flops, peak_bytes = CHIP_SPECS.get(device_kind, (None, None))
  lines = [f"device: {device_kind}; matmul peer (bf16, same run): "
           f"{peer_flops / 1e12:.1f} TFLOP/s"
           + (f" = {peer_flops / peak_flops:.0%} of the {peak_flops / 1e12:.0f} TFLOP/s spec"
              if peak_flops else ""),
           "",
           "| model | what | step s | compile s | tok/s | TFLOP/s | MFU | of matmul | GB/s "
           "| peak GiB | check |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    flops = r.get("flops")
    tflops = f"{flops / 1e12:.2f}" if flops else ""
    mfu = f"{flops / peak_flops:.1%}" if flops and peak_flops else ""
    of_peer = f"{flops / peer_flops:.1%}" if flops else ""
    gbs = f"{r['bytes'] / 1e9:.0f}" if r.get("bytes") else ""
    if r.get("bytes") and peak_bytes:
      gbs += f" ({r['bytes'] / peak_bytes:.0%})"
    peak = f"{r['peak_bytes'] / 2**30:.1f}" if r.get("peak_bytes") else ""
    timing = ([f"{r['seconds']:.4f}", f"{r['compile_s']:.1f}", f"{r['tokens_per_s']:,.0f}"]
              if "seconds" in r else ["", "", ""])
    status = "ok" if r["ok"] else "FAILED"
    cells = [r["model"], r["what"], *timing, tflops, mfu, of_peer, gbs, peak,
             f"{status}: {r['check']}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="tiny shapes, float32, CPU-friendly (a test of this script)")
  parser.add_argument("--models", default="",
                      help="comma-separated presets: only their rows run")
  parser.add_argument("--dtype", default="", choices=("", "float32", "bfloat16"),
                      help="activation dtype (default bfloat16; float32 with --smoke)")
  parser.add_argument("--out", default="", help="also write the table to this file")
  parser.add_argument("--memory-case", default="", help=argparse.SUPPRESS)
  parser.add_argument("--repeats", type=int, default=0, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  sizes = SMOKE if args.smoke else FULL
  dtype = args.dtype or ("float32" if args.smoke else "bfloat16")
  if args.memory_case:
    row = memory_case(TrainCase.decode(args.memory_case), dtype, args.repeats or 2)
    sys.stdout.write(json.dumps(row) + "\n")
    return 0
  if args.models:
    keep = set(args.models.split(","))
    sizes = dataclasses.replace(
        sizes, decode_models=tuple(m for m in sizes.decode_models if m in keep),
        train=tuple(c for c in sizes.train if c.model in keep),
        memory=tuple(c for c in sizes.memory if c.model in keep))

  # Before this process takes the device (JAX may preallocate most of its memory).
  memory_rows = [guarded(c.model, c.label(), check_memory, c, dtype, 2) for c in sizes.memory]

  import jax

  device = jax.devices()[0]
  peer = matmul_peer(sizes.matmul, sizes.repeats)
  rows = [guarded(c.model, c.label(), check_train, c, dtype, sizes.repeats)
          for c in sizes.train]
  rows += memory_rows
  rows += [guarded(m, "decode", check_decode, m, dtype, sizes) for m in sizes.decode_models]
  table = format_table(rows, peer, device.device_kind)
  sys.stdout.write(f"jax {jax.__version__}, backend {jax.default_backend()}, "
                   f"activations {dtype}\n{table}\n")
  if args.out:
    with open(args.out, "w") as f:
      f.write(table + "\n")
  return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
