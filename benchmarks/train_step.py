"""Policy-update throughput: mgrpo_jax's jitted train step vs transformers + torch.

Both sides do the same work on the same weights and the same batch (N sequences x T
tokens, float32, CPU):
  forward of the whole batch -> per-token log-probs of the given tokens (log-softmax
  over the vocabulary, gather) -> token-level clipped policy loss (ratio
  exp(logp - old_logp), clip 0.2 / 0.28, masked, sequence-mean-token-mean over rows)
  -> backward -> global-norm gradient clipping (1.0) -> AdamW step (decay on matrices).
  mgrpo_jax: `training.make_update_fn` (one jitted, donated XLA program: Flax NNX
    Llama + core.losses.policy_loss + optax, log-probs in LM-head chunks of the
    default `UpdateConfig.logprob_chunk`), on a 1-device mesh.
  peer: transformers `LlamaForCausalLM` (default attention, sdpa) loaded from the
    mgrpo_jax model's weights written as a safetensors folder, the same loss in torch,
    `loss.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`, with `.venv-ref`
    (created by tools/make_reference_venv.sh if missing).
Each side runs in its own subprocess, one after the other, so each one's peak RSS is its
own (the peer's includes loading the folder, ours building the model).
Models: the `tiny` preset and SmolLM2-135M's shape (`smollm2_135m`, random init; timing
does not depend on the values). The first step (compile for JAX, warm-up for torch) is
reported apart; tokens/s = N * T / the median of the timed steps. The step-1 loss and
gradient norm of both sides are printed as a check that they compute the same thing.
With `--profile`, our side traces one more step and prints where XLA's ops spend it
(matmuls, layout copies, the rest: `xla_profile.py`).

  .venv/bin/python benchmarks/train_step.py [--models tiny,smollm2_135m] [--repeats 3]
      [--batch 8] [--seq 256] [--prompt 64] [--logprob-chunk C] [--remat none] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_timing import timed_updates
from xla_profile import format_profile, profile_ops

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LEARNING_RATE, WEIGHT_DECAY, BETAS, GRAD_CLIP = 1e-5, 0.1, (0.9, 0.98), 1.0
CLIP_LOW, CLIP_HIGH = 0.2, 0.28


def make_batch(vocab: int, batch: int, seq: int, prompt: int) -> dict[str, np.ndarray]:
  """Random tokens; loss on the tokens after the prompt; old log-probs near -log V."""
  rng = np.random.default_rng(0)
  mask = np.zeros((batch, seq), np.float32)
  for i in range(batch):  # responses of different lengths, right-padded
    mask[i, prompt:seq - 8 * i] = 1.0
  return {
      "ids": rng.integers(0, vocab, (batch, seq)).astype(np.int32),
      "loss_mask": mask,
      "old_logp": (-np.log(vocab) + 0.05 * rng.standard_normal((batch, seq))).astype(np.float32),
      "advantages": rng.standard_normal(batch).astype(np.float32),
  }


def run_torch_peer(folder: str, batch_file: str, repeats: int) -> dict:
  """transformers + torch: the same train step (runs under .venv-ref)."""
  import torch
  from transformers import AutoModelForCausalLM

  data = {k: torch.from_numpy(v) for k, v in np.load(batch_file).items()}
  ids, mask, old, adv = (data["ids"].long(), data["loss_mask"], data["old_logp"],
                         data["advantages"])
  model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
  model.train()
  decay = [p for p in model.parameters() if p.ndim >= 2]
  no_decay = [p for p in model.parameters() if p.ndim < 2]
  optimizer = torch.optim.AdamW(
      [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay,
                                                         "weight_decay": 0.0}],
      lr=LEARNING_RATE, betas=BETAS, eps=1e-8)

  def step() -> tuple[float, float]:
    logits = model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    logp = torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)
    ratio = torch.exp(torch.where(mask > 0, logp - old, torch.zeros_like(logp)))
    a = adv[:, None]
    pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH)) * mask
    n = mask.sum(-1)
    loss = (pg.sum(-1) / n.clamp(min=1)).sum() / (n > 0).sum()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach()), float(grad_norm)

  start = time.perf_counter()
  first_loss, first_grad_norm = step()
  first_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
  return {"first_s": first_s, "times": times, "loss": first_loss,
          "grad_norm": first_grad_norm, "threads": torch.get_num_threads(),
          "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def side_results(python: pathlib.Path, side_args: list[str], out_file: pathlib.Path,
                 script: str = __file__) -> dict:
  """Runs `script` (this one by default) as one side (`--side ...`) in a subprocess of
  `python`; returns the JSON it wrote to `out_file`."""
  env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
  subprocess.run([str(python), script, *side_args, "--out", str(out_file)], check=True,
                 env=env)
  return json.loads(out_file.read_text())


def peer_results(folder: pathlib.Path, batch_file: pathlib.Path, repeats: int) -> dict:
  python = REPO_ROOT / ".venv-ref" / "bin" / "python"
  if not python.exists():
    subprocess.run(["bash", str(REPO_ROOT / "tools" / "make_reference_venv.sh")], check=True)
  return side_results(python, ["--side", "peer", "--folder", str(folder), "--batch-file",
                               str(batch_file), "--repeats", str(repeats)],
                      folder.parent / f"{folder.name}.peer.json")


def jax_results(name: str, batch_file: pathlib.Path, repeats: int, logprob_chunk: int | None,
                remat: str, profile: bool) -> dict:
  chunk = [] if logprob_chunk is None else ["--logprob-chunk", str(logprob_chunk)]
  return side_results(pathlib.Path(sys.executable),
                      ["--side", "jax", "--models", name, "--batch-file", str(batch_file),
                       "--repeats", str(repeats), "--remat", remat, *chunk,
                       *(["--profile"] if profile else [])],
                      batch_file.parent / f"{name}.jax.json")


def run_jax(name: str, batch_file: str, repeats: int, logprob_chunk: int | None,
            remat: str, profile: bool = False) -> dict:
  """mgrpo_jax: the jitted update of `mgrpo_jax.training` on a 1-device mesh."""
  sys.path.insert(0, str(REPO_ROOT))
  import jax

  from mgrpo_jax.models import get_config, init_model
  from mgrpo_jax.training import (
      MeshConfig,
      OptimizerConfig,
      TrainBatch,
      UpdateConfig,
      create_mesh,
      create_train_state,
      make_optimizer,
      make_update_fn,
  )
  from mgrpo_jax.utils.compile_counter import CompileCounter

  optim = OptimizerConfig(learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY, b1=BETAS[0],
                          b2=BETAS[1], grad_clip=GRAD_CLIP)
  batch = dict(np.load(batch_file))
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(init_model(get_config(name), seed=0),
                                     make_optimizer(optim), mesh, seed=0)
  n = batch["ids"].shape[0]
  chunk = {} if logprob_chunk is None else {"logprob_chunk": logprob_chunk}
  update_config = UpdateConfig(remat=remat, **chunk)
  update = make_update_fn(layout, update_config, n)
  train_batch = TrainBatch(weights=np.ones(n, np.float32), **batch)
  state, first_s, _, first = timed_updates(update, state, train_batch, 0)  # compiles
  with CompileCounter() as counter:
    state, _, times, _ = timed_updates(update, state, train_batch, repeats)
  ops = None
  if profile:  # one more step, traced (after the timed ones: tracing slows a step)
    with tempfile.TemporaryDirectory() as trace_dir:
      ops = profile_ops(lambda: update(state, train_batch), trace_dir)
  return {"first_s": first_s, "profile": ops, "times": times, "loss": first["loss"],
          "grad_norm": first["grad_norm"], "recompiles": counter.count,
          "logprob_chunk": update_config.logprob_chunk,
          "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default="tiny,smollm2_135m")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seq", type=int, default=256)
  parser.add_argument("--prompt", type=int, default=64)
  parser.add_argument("--logprob-chunk", type=int, default=None,
                      help="our LM-head chunk (default: UpdateConfig's)")
  parser.add_argument("--remat", default="none", choices=("none", "full", "dots"),
                      help="our per-block rematerialization")
  parser.add_argument("--profile", action="store_true",
                      help="also trace one more step of ours and print where XLA's ops spend it")
  parser.add_argument("--side", choices=("jax", "peer"), help=argparse.SUPPRESS)
  parser.add_argument("--folder", help=argparse.SUPPRESS)
  parser.add_argument("--batch-file", help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    result = (run_torch_peer(args.folder, args.batch_file, args.repeats) if args.side == "peer"
              else run_jax(args.models, args.batch_file, args.repeats, args.logprob_chunk,
                           args.remat, args.profile))
    pathlib.Path(args.out).write_text(json.dumps(result))
    return

  sys.path.insert(0, str(REPO_ROOT))
  from mgrpo_jax.models import get_config, init_model
  from mgrpo_jax.models.weights.safetensors import save_hf_folder

  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.models.split(","):
      config = get_config(name)
      model = init_model(config, seed=0)
      folder = save_hf_folder(model, pathlib.Path(tmp) / name)
      batch = make_batch(config.vocab_size, args.batch, args.seq, args.prompt)
      batch_file = pathlib.Path(tmp) / f"{name}.npz"
      np.savez(batch_file, **batch)
      del model
      peer = peer_results(folder, batch_file, args.repeats)
      ours = jax_results(name, batch_file, args.repeats, args.logprob_chunk, args.remat,
                         args.profile)
      rows.append((name, config.num_params, ours, peer))

  tokens = args.batch * args.seq
  print(f"train step (forward + clipped policy loss + backward + clip + AdamW), f32, CPU "
        f"{os.cpu_count()} cores shared with other jobs; batch {args.batch} x {args.seq} "
        f"({args.seq - args.prompt - 8 * (args.batch - 1)}-{args.seq - args.prompt} loss "
        f"tokens per row); median of {args.repeats} steps after the first")
  print(f"{'model':<14}{'params':>8}{'side':>14}{'first s':>9}{'step s':>8}{'tok/s':>9}"
        f"{'loss@1':>11}{'|g|@1':>9}{'RSS GiB':>9}")
  for name, params, ours, peer in rows:
    for side, r in (("mgrpo_jax", ours), ("torch+HF", peer)):
      step_s = statistics.median(r["times"])
      print(f"{name:<14}{params / 1e6:>7.1f}M{side:>14}{r['first_s']:>9.1f}{step_s:>8.2f}"
            f"{tokens / step_s:>9.0f}{r['loss']:>11.5f}{r['grad_norm']:>9.4f}"
            f"{r['peak_rss_gb']:>9.2f}")
    ratio = statistics.median(peer["times"]) / statistics.median(ours["times"])
    print(f"{name:<14}{'':>8}{'ratio':>14}  mgrpo_jax / torch tokens/s = {ratio:.2f}x; "
          f"recompiles in timed steps: {ours['recompiles']}; torch threads {peer['threads']}; "
          f"ours: logprob_chunk {ours['logprob_chunk']}, remat {args.remat}")
    if ours["profile"]:
      print("\n".join(f"{name:<14}{line}" for line in format_profile(ours["profile"])))


if __name__ == "__main__":
  main()
