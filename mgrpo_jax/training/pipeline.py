"""The whole run of `--slice=all` as stages, each resumable and each runnable alone.

  warm_start  (`warm_start.enabled`) the paper's stage 1: the noisy oracles demonstrate
              `warm_start.num_questions` questions about `warm_start.num_worlds`
              training worlds (`demonstration_worlds`); each trained agent, in its own
              process (`warm_start_agent`, the agents concurrently), first learns to
              copy (`warm_start.copy_steps` and `window_copy_steps` of
              `copy_curriculum`), then is fine-tuned on its own demonstrations
              (`warm_start.sft`) and saved as a parameter checkpoint in
              `<local>/warm_start/<role>` (or `warm_start.dir`, shared by runs with the
              same warm start); the RL slices start from it
              (`<role>.model.init_checkpoint`, unless already set).
  eval before (`eval.enabled`) the warm-started agents on the held-out test world
              -> `<local>/eval/warm_start.json`.
  rl          stage 2, M-GRPO: the two slices as processes (`run.run_children`); with
              `eval.every` = e > 0 they keep the checkpoints of every e-th step.
  eval after  the RL run's latest checkpoints -> `<local>/eval/final.json`; with e > 0
              also, greedy only, the checkpoints of steps e, 2e, ... before the last ->
              `<local>/eval/step_<t>.json` (the held-out curve).
  report      PNG plots of the training curves and the before/after table, printed and
              written to `<local>/report/` (`mgrpo_jax.metrics.report`).

A stage whose output exists is skipped, so re-running the command after an interruption
continues where it stopped (the RL stage resumes from its checkpoints).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import pathlib
import time
from typing import Any

from absl import logging as absl_logging

from mgrpo_jax.metrics import PhaseProgress, report
from mgrpo_jax.training import (
  agent_setup,
  copy_curriculum,
  demonstration_worlds,
  evaluation,
  warm_start,
)
from mgrpo_jax.training.data import ensure_world, world_rendering
from mgrpo_jax.training.files import atomic_write, file_lock
from mgrpo_jax.training.mesh import MeshConfig, create_mesh
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.slice_common import RunPaths, log
from mgrpo_jax.training.train_state import create_train_state

# Batch lengths T of the SFT (a batch takes the smallest >= its longest row): steps of 32
# and 64 tokens up to 640, so short demonstrations (the symbolic world's: 60-120 tokens)
# pay for little padding.
SFT_BUCKETS = (64, 96, 128, 192, 256, 320, 384, 448, 512, 576, 640, 768, 1024, 1536, 2048, 4096)
_DONE = "warm_start.json"
SFT_WARMUP_STEPS = 10  # linear warm-up of the warm start's learning rate
# Tokens per copy-curriculum sequence (`copy_curriculum.copy_sequences`).
COPY_LENGTH = 128
# Sequences the logged NLL before and after each SFT phase is measured on (a diagnostic).
NLL_SEQUENCES = 64


def trained_roles(mode: str) -> tuple[str, ...]:
  """Agents with their own weights in `mode` ("main" is the single agent there)."""
  return ("main",) if mode in ("single_agent", "shared_policy") else ("main", "sub")


def warm_start_folder(config, paths: RunPaths) -> pathlib.Path:
  """`warm_start.dir` resolved against the run's folder (default `<local>/warm_start`)."""
  return (paths.local / (str(config.warm_start.dir) or "warm_start")).resolve()


def run_warm_start(config, paths: RunPaths, spawn) -> dict[str, str]:
  """Stage 1 (module docstring); returns {role: parameter checkpoint folder}.

  What every agent's process reads (the world, the demonstration worlds' indexes) is
  built here first; then each trained agent's warm start runs as its own process
  (`spawn(config, workdir, roles, "warm_start")`, `warm_start_agent`), concurrently. A
  folder shared by several runs (`warm_start.dir`) is built once, under a file lock.
  """
  mode = str(config.experiment.mode)
  folder = warm_start_folder(config, paths)
  folder.mkdir(parents=True, exist_ok=True)
  dirs = {role: str(folder / role) for role in trained_roles(mode)}
  with file_lock(folder / ".lock"):
    done = folder / _DONE
    if done.exists():
      log(f"warm start: reusing {folder}")
      return dirs
    started = time.perf_counter()
    world_path = ensure_world(paths.local, config.world)
    worlds = demonstration_worlds.demonstration_worlds(config, world_path, folder)
    summary: dict[str, Any] = {"num_questions": sum(len(w.questions) for w in worlds),
                               "num_worlds": len(worlds)}
    spawn(config, str(paths.workdir), tuple(dirs), "warm_start")
    for role in dirs:
      summary[role] = json.loads(_agent_summary(folder, role).read_text())
    summary["seconds"] = time.perf_counter() - started
    atomic_write(done, json.dumps(summary, indent=1).encode())
  return dirs


def _agent_summary(folder: pathlib.Path, role: str) -> pathlib.Path:
  return folder / f"{role}.json"


def warm_start_agent(config, workdir: str, role: str) -> None:
  """One agent's stage 1 (`--slice=<role> --stage=warm_start`): collects the noisy
  oracles' demonstrations, then the copy curriculum and SFT of `role`'s model; writes
  its parameter checkpoint `<folder>/<role>` and `<folder>/<role>.json` (skipped when
  that exists).

  Args:
    config: the run's config.
    workdir: the run's folder.
    role: "main" (M, or the single agent) or "sub"; must be trained in
      `experiment.mode` (`trained_roles`).
  """
  paths = RunPaths.from_config(config, workdir)
  mode = str(config.experiment.mode)
  if role not in trained_roles(mode):
    raise ValueError(f"experiment.mode={mode!r} trains {trained_roles(mode)}, not {role!r}")
  folder = warm_start_folder(config, paths)
  if _agent_summary(folder, role).exists():
    log(f"warm start {role}: reusing {folder / role}")
    return
  ws = config.warm_start
  seed = int(config.experiment.seed)
  world_path = ensure_world(paths.local, config.world)
  worlds = demonstration_worlds.demonstration_worlds(config, world_path, folder)
  main_spec, sub_spec = agent_setup.agent_specs(config)
  models = {r: agent_setup.build_model(config[r], r, paths.local, config)
            for r in trained_roles(mode)}
  # S's demonstrations go to S's model in its own ids (to M's in shared_policy).
  sub_tokenizer = models["sub"][1] if "sub" in models else None
  rendering = world_rendering(config)
  demonstrate = functools.partial(
      warm_start.collect_demonstrations, models["main"][1], sub_tokenizer=sub_tokenizer,
      config=agent_setup.rollout_config(config),
      main_oracle=rendering.main_oracle(float(ws.main_noise_rate), seed),
      sub_oracle=rendering.sub_oracle(float(ws.sub_noise_rate), seed),
      mode=warm_start.demonstration_mode(mode),
      main_spec=main_spec, sub_spec=sub_spec, key=agent_setup.derive_seed(seed, "demos"))
  sequences = []
  for world in worlds:
    demos = demonstrate(registry=world.registry, tasks=world.questions)
    if role == "sub":
      sequences += demos.sub
    else:
      sequences += demos.main + (demos.sub if mode == "shared_policy" else [])
  model, role_tokenizer = models[role]
  optim = OptimizerConfig(learning_rate=float(ws.learning_rate), weight_decay=0.0,
                          warmup_steps=SFT_WARMUP_STEPS, eps=1e-8)
  mesh = create_mesh(MeshConfig.from_config(config[role].mesh))
  state, layout = create_train_state(model, make_optimizer(optim), mesh,
                                     seed=agent_setup.derive_seed(seed, "warm_start", role))
  sft_config = warm_start.SFTConfig(epochs=int(ws.epochs), batch_rows=int(ws.batch_rows),
                                    buckets=SFT_BUCKETS, length_groups=8,
                                    nll_every_epoch=False, nll_sequences=NLL_SEQUENCES,
                                    seed=agent_setup.derive_seed(seed, "sft", role))
  pad_id = role_tokenizer.pad_id or 0
  started = time.perf_counter()
  summary: dict[str, Any] = {"demonstrations": len(sequences)}
  if int(ws.copy_steps) or int(ws.window_copy_steps):
    state, summary["copy_curriculum"] = _learn_to_copy(
        role, state, layout, sequences, int(ws.copy_steps), int(ws.window_copy_steps),
        sft_config, pad_id)
  _, metrics = warm_start.sft(state, layout, sequences, sft_config,
                              checkpoint_dir=str(folder / role), pad_id=pad_id,
                              progress=PhaseProgress(f"warm start {role} (sft)", log))
  summary.update(steps=metrics["steps"], nll=metrics["nll"],
                 seconds=time.perf_counter() - started)
  log(f"warm start {role}: {len(sequences)} demonstrations, {metrics['steps']} steps, "
      f"NLL {metrics['nll'][0]:.2f} -> {metrics['nll'][-1]:.3f} ({summary['seconds']:.0f} s)")
  atomic_write(_agent_summary(folder, role), json.dumps(summary, indent=1).encode())


def _learn_to_copy(role: str, state, layout, demonstrations, steps: int, window_steps: int,
                   sft_config: warm_start.SFTConfig, pad_id: int) -> tuple[Any, dict[str, Any]]:
  """The copy curriculum: `steps` SFT steps of random-token copies over the
  demonstrations' token ids, then `window_steps` of copies inside their own windows."""
  started = time.perf_counter()
  rows = sft_config.batch_rows
  # Windows as long as the longest demonstration, at most COPY_LENGTH (the symbolic
  # world's are about 70-120 tokens).
  window = min(COPY_LENGTH, max(len(d.ids) for d in demonstrations))
  phases = {
      "random": (steps, lambda: copy_curriculum.copy_sequences(
          steps * rows, copy_curriculum.demonstration_token_ids(demonstrations),
          length=COPY_LENGTH, seed=sft_config.seed)),
      "windows": (window_steps, lambda: copy_curriculum.window_sequences(
          window_steps * rows, demonstrations, length=window, seed=sft_config.seed)),
  }
  config = warm_start.SFTConfig(epochs=1, batch_rows=rows, buckets=(COPY_LENGTH,),
                                seed=sft_config.seed, nll_every_epoch=False,
                                nll_sequences=NLL_SEQUENCES)
  summary: dict[str, Any] = {}
  for phase, (count, sequences) in phases.items():
    if count:
      state, summary[phase] = warm_start.sft(
          state, layout, sequences(), config, pad_id=pad_id,
          progress=PhaseProgress(f"copy curriculum {role} ({phase})", log))
      log(f"copy curriculum {role} ({phase}): {summary[phase]['steps']} steps, NLL "
          f"{summary[phase]['nll'][0]:.2f} -> {summary[phase]['nll'][-1]:.3f}")
  summary["seconds"] = time.perf_counter() - started
  log(f"copy curriculum {role}: {summary['seconds']:.0f} s")
  return state, summary


def with_init_checkpoints(config, dirs: dict[str, str]):
  """A copy of `config` whose agents start from `dirs` (keys already set are kept)."""
  config = copy.deepcopy(config)
  for role, directory in dirs.items():
    if not config[role].model.init_checkpoint:
      config[role].model.init_checkpoint = directory
  if "sub" not in dirs and config.experiment.mode == "shared_policy":
    config.sub.model.init_checkpoint = config.main.model.init_checkpoint
  return config


def run_evaluation(config, paths: RunPaths, label: str, sources: dict[str, evaluation.Source],
                   *, greedy_only: bool = False) -> dict[str, Any]:
  """Evaluates once per label; `<local>/eval/<label>.json` holds the summary."""
  out = paths.local / "eval" / f"{label}.json"
  if out.exists():
    return json.loads(out.read_text())
  started = time.perf_counter()
  result = evaluation.evaluate_sources(config, paths.local, sources, greedy_only=greedy_only)
  summary = dict(result.summary, label=label, seconds=time.perf_counter() - started)
  atomic_write(out, json.dumps(summary, indent=1).encode())
  log(f"eval {label}: accuracy {summary['accuracy']:.3f} +- {summary['accuracy_ci95']:.3f} "
      f"on {summary['num_questions']} test questions ({summary['seconds']:.0f} s)")
  return summary


def curve_steps(every: int, num_steps: int) -> range:
  """RL steps whose checkpoints the held-out curve evaluates: e, 2e, ... before the
  last step (evaluated anyway); none for e = 0."""
  return range(every, num_steps, every) if every else range(0)


def run_all(config, workdir: str, spawn) -> None:
  """warm start -> eval before -> RL -> eval after -> report.

  Args:
    config: the run's config.
    workdir: the run's folder.
    spawn: `spawn(config, workdir, slices, stage)` runs `stage` ("warm_start", "rl") of
      each of `slices` ("main", "sub") as concurrent processes (`run.run_children`).
  """
  absl_logging.set_verbosity(absl_logging.WARNING)  # library INFO lines drown the stages
  paths = RunPaths.from_config(config, workdir)
  mode = str(config.experiment.mode)
  before = after = None
  if config.warm_start.enabled:
    config = with_init_checkpoints(config, run_warm_start(config, paths, spawn))
  initial = {role: evaluation.Source(str(config[role].model.init_checkpoint), "params")
             for role in trained_roles(mode) if config[role].model.init_checkpoint}
  if config.eval.enabled and len(initial) == len(trained_roles(mode)):
    before = run_evaluation(config, paths, "warm_start", initial)
  every = int(config.eval.every) if config.eval.enabled else 0
  if every:  # keep the curve's checkpoints, and those of a keep_period already set
    config = copy.deepcopy(config)
    config.checkpoint.keep_period = math.gcd(int(config.checkpoint.keep_period), every)
  spawn(config, workdir, ("sub", "main"), "rl")
  curve = []
  if config.eval.enabled:
    final = {role: evaluation.Source(paths.checkpoints(role), "state")
             for role in trained_roles(mode)}
    after = run_evaluation(config, paths, "final", final)
    for step in curve_steps(every, int(config.experiment.num_steps)):
      sources = {role: evaluation.Source(paths.checkpoints(role), "state", step)
                 for role in trained_roles(mode)}
      curve.append((step, run_evaluation(config, paths, f"step_{step}", sources,
                                         greedy_only=True)))
  written = report.write_report(paths.local, paths.logs("main") / "metrics.jsonl",
                                paths.logs("sub") / "metrics.jsonl", before, after,
                                title=f"{config.experiment.name} ({mode})", curve=curve)
  for line in written.table.splitlines():
    log(line)
  log(f"report: {', '.join(str(p) for p in written.files)}")
