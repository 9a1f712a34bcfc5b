"""The warm start stage (the paper's stage 1) of one run, and of each trained agent.

`run_warm_start` (in the `--slice=all` parent) builds what every agent's process reads
(the world, the demonstration worlds' indexes), then starts each trained agent's warm
start as its own process, concurrently: `warm_start_agent` (`--slice=<role>
--stage=warm_start`) collects the noisy oracles' demonstrations of
`warm_start.num_questions` questions about `warm_start.num_worlds` training worlds
(`demonstration_worlds`), runs the copy curriculum (`warm_start.copy_steps` and
`window_copy_steps`, `copy_curriculum`), fine-tunes the agent on its own
demonstrations (`sft`) and saves a parameter checkpoint in `<local>/warm_start/<role>`
(or `warm_start.dir`, shared by runs with the same warm start: the folder records what
it was computed from, and a run that would compute another stops, naming the key:
`folder_config`). The RL slices start from it (`with_init_checkpoints`:
`<role>.model.init_checkpoint`, unless already set).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import pathlib
import time
from typing import Any

from mgrpo_jax.config.modes import Mode, parse_mode
from mgrpo_jax.metrics import PhaseProgress
from mgrpo_jax.scale.writers import log
from mgrpo_jax.tasks.world_data import ensure_world
from mgrpo_jax.tasks.world_setup import NoiseSettings, WorldSetup, noisy_oracles
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.mesh import create_mesh
from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
from mgrpo_jax.training.paths import RunPaths, warm_start_folder
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from mgrpo_jax.training.train_state import create_train_state
from mgrpo_jax.utils.atomic_files import atomic_write
from mgrpo_jax.utils.file_lock import file_lock
from mgrpo_jax.warm_start.budget import demonstrated_tokens, questions_for_tokens
from mgrpo_jax.warm_start.copy_curriculum import (
  copy_sequences,
  demonstration_token_ids,
  window_sequences,
)
from mgrpo_jax.warm_start.demonstration_worlds import demonstration_worlds
from mgrpo_jax.warm_start.demonstrations import Demonstrators, collect_demonstrations
from mgrpo_jax.warm_start.folder_config import check_or_record
from mgrpo_jax.warm_start.sft import SFTConfig, sft, sft_steps

# Batch lengths T of the SFT (a batch takes the smallest >= its longest row): steps of 32
# and 64 tokens up to 640, so short demonstrations (the symbolic world's: 60-120 tokens)
# pay for little padding.
SFT_BUCKETS = (64, 96, 128, 192, 256, 320, 384, 448, 512, 576, 640, 768, 1024, 1536, 2048, 4096)
# Batches per length-sorted window of the SFT (`SFTConfig.length_groups`): rows of
# similar length share a batch, so a batch pays little padding, while the shuffle of the
# batches keeps the epoch's order random.
SFT_LENGTH_GROUPS = 8
# Steps of linear warm-up to `warm_start.learning_rate`, a high rate (3e-3 by default,
# for models trained from scratch) that the first updates of a fresh model would
# otherwise take at full size.
SFT_WARMUP_STEPS = 10
# The warm start takes plain Adam steps (no weight decay); the RL stage's optimizer has
# its own, `<role>.optim.weight_decay`.
SFT_WEIGHT_DECAY = 0.0
# Tokens per copy-curriculum sequence (`copy_sequences`, spans of 4-24 tokens and their
# copy), as long as the symbolic world's demonstrations (about 70-120 tokens); their
# windows are cut to at most this length too.
COPY_LENGTH = 128
# Sequences the logged NLL before and after each SFT phase is measured on (a diagnostic:
# a pass over all of them would cost more than it tells).
NLL_SEQUENCES = 64
_DONE = "warm_start.json"


def run_warm_start(config, mode: Mode, paths: RunPaths, spawn) -> dict[str, str]:
  """Stage 1 (module docstring); returns {role: parameter checkpoint folder}.

  What every agent's process reads (the world, the demonstration worlds' indexes) is
  built here first; then each trained agent's warm start runs as its own process
  (`spawn(config, workdir, roles, "warm_start")`, `warm_start_agent`), concurrently. A
  folder shared by several runs (`warm_start.dir`) is built once, under a file lock.
  """
  folder = warm_start_folder(config, paths)
  folder.mkdir(parents=True, exist_ok=True)
  dirs = {role: str(folder / role) for role in mode.agents}
  with file_lock(folder / ".lock"):
    done = folder / _DONE
    check_or_record(config, mode, folder, built=_built(folder, dirs))
    if done.exists():
      log(f"warm start: reusing {folder}")
      return dirs
    started = time.perf_counter()
    world_path = ensure_world(paths.local, WorldSetup.from_config(config), log)
    worlds = demonstration_worlds(config, world_path, folder)
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


def _built(folder: pathlib.Path, roles) -> bool:
  """Whether `folder` holds a warm start, or any of `roles`' part of one."""
  return (folder / _DONE).exists() or any(_agent_summary(folder, r).exists() for r in roles)


def warm_start_agent(config, mode: Mode, workdir: str, role: str) -> None:
  """One agent's stage 1 (`--slice=<role> --stage=warm_start`): collects the noisy
  oracles' demonstrations, then the copy curriculum and SFT of `role`'s model; writes
  its parameter checkpoint `<folder>/<role>` and `<folder>/<role>.json` (skipped when
  that exists).

  Args:
    config: the run's config.
    mode: its `experiment.mode`, parsed.
    workdir: the run's folder.
    role: "main" (M, or the single agent) or "sub"; must be trained in `mode`
      (`Mode.agents`).
  """
  paths = RunPaths.from_config(config, workdir)
  mode.check_agent(role)
  folder = warm_start_folder(config, paths)
  folder.mkdir(parents=True, exist_ok=True)
  check_or_record(config, mode, folder, built=_built(folder, mode.agents))
  if _agent_summary(folder, role).exists():
    log(f"warm start {role}: reusing {folder / role}")
    return
  ws = config.warm_start
  seed = int(config.experiment.seed)
  world_setup = WorldSetup.from_config(config)
  world_path = ensure_world(paths.local, world_setup, log)
  worlds = demonstration_worlds(config, world_path, folder)
  main_spec, sub_spec = agent_setup.agent_specs(config, mode)
  setups = {r: AgentSetup.from_config(config, r) for r in mode.agents}
  tokenizer = functools.partial(agent_setup.world_tokenizer, paths.local,
                                TokenizerSetup.from_config(config))
  models = {r: agent_setup.build_model(setups[r], tokenizer) for r in mode.agents}
  # S's demonstrations go to S's model in its own ids (to M's in shared_policy).
  sub_tokenizer = models["sub"][1] if "sub" in models else None
  main_oracle, sub_oracle = noisy_oracles(world_setup, NoiseSettings.from_config(config),
                                          seed)
  team = Demonstrators(main_oracle=main_oracle, sub_oracle=sub_oracle, main_spec=main_spec,
                       sub_spec=sub_spec, sub_tokenizer=sub_tokenizer)
  demonstrate = functools.partial(
      collect_demonstrations, models["main"][1], config=agent_setup.rollout_config(config),
      demonstrators=team, mode=mode.demonstration,
      key=agent_setup.derive_seed(seed, "demos"))
  if mode.single and str(ws.budget) == "team_tokens":
    team_mode = parse_mode("mgrpo")
    as_team = functools.partial(demonstrate, mode=team_mode, demonstrators=dataclasses.replace(
        team, main_spec=agent_setup.agent_specs(config, team_mode)[0]))
    worlds, budget = _team_token_worlds(config, world_path, folder, worlds, demonstrate,
                                        as_team)
  else:
    budget = {}
  sequences = []
  for world in worlds:
    demos = demonstrate(registry=world.registry, tasks=world.questions)
    if role == "sub":
      sequences += demos.sub
    else:
      sequences += demos.main + (demos.sub if mode.shared else [])
  if not sequences:
    raise ValueError(
        f"warm start {role}: the noisy oracles' {ws.num_questions} questions gave no "
        f"{role} demonstrations; a turn longer than <agent>.sampling.max_new_tokens is cut "
        f"and ends its rollout (M's delegations, and with them S's calls, then never "
        f"happen), as do limits.max_turns and limits.max_context too small for a rollout")
  model, role_tokenizer = models[role]
  sft_config = SFTConfig(epochs=int(ws.epochs), batch_rows=int(ws.batch_rows),
                         buckets=SFT_BUCKETS, length_groups=SFT_LENGTH_GROUPS,
                         nll_every_epoch=False, nll_sequences=NLL_SEQUENCES,
                         remat=setups[role].update.remat,
                         micro_batch_size=setups[role].update.micro_batch_size,
                         seed=agent_setup.derive_seed(seed, "sft", role))
  optim = warm_start_optimizer(ws, len(sequences), sft_config)
  mesh = create_mesh(setups[role].mesh)
  state, layout = create_train_state(model, make_optimizer(optim), mesh,
                                     seed=agent_setup.derive_seed(seed, "warm_start", role))
  pad_id = role_tokenizer.pad_id or 0
  started = time.perf_counter()
  summary: dict[str, Any] = {"demonstrations": len(sequences),
                             "demonstrated_tokens": demonstrated_tokens(sequences), **budget}
  if int(ws.copy_steps) or int(ws.window_copy_steps):
    state, summary["copy_curriculum"] = _learn_to_copy(
        role, state, layout, sequences, int(ws.copy_steps), int(ws.window_copy_steps),
        sft_config, pad_id)
  _, metrics = sft(state, layout, sequences, sft_config,
                   checkpoint_dir=str(folder / role), pad_id=pad_id,
                   progress=PhaseProgress(f"warm start {role} (sft)", log))
  summary.update(steps=metrics["steps"], nll=metrics["nll"],
                 seconds=time.perf_counter() - started)
  log(f"warm start {role}: {len(sequences)} demonstrations, {metrics['steps']} steps, "
      f"NLL {metrics['nll'][0]:.2f} -> {metrics['nll'][-1]:.3f} ({summary['seconds']:.0f} s)")
  atomic_write(_agent_summary(folder, role), json.dumps(summary, indent=1).encode())


def _team_token_worlds(config, world_path: pathlib.Path, folder: pathlib.Path, worlds,
                       demonstrate, as_team) -> tuple[list, dict[str, int]]:
  """The single agent's demonstration worlds with the team's demonstrated tokens
  (`warm_start.budget=team_tokens`, `budget.py`), and the counts that sized them.
  `demonstrate` and `as_team` give the single agent's and the team's (M with S)
  demonstrations of a world's questions."""
  team = single = 0
  for world in worlds:
    demos = as_team(registry=world.registry, tasks=world.questions)
    team += demonstrated_tokens(demos.main) + demonstrated_tokens(demos.sub)
    single += demonstrated_tokens(demonstrate(registry=world.registry,
                                              tasks=world.questions).main)
  num_questions = int(config.warm_start.num_questions)
  scaled = questions_for_tokens(num_questions, team, single)
  log(f"warm start main: the team's {num_questions} questions are {team} demonstrated "
      f"tokens, the single agent's {single}: it demonstrates {scaled} questions")
  return (demonstration_worlds(config, world_path, folder, num_questions=scaled),
          {"team_tokens": team, "team_questions": num_questions, "questions": scaled})


def warm_start_optimizer(ws, num_sequences: int, sft_config: SFTConfig) -> OptimizerConfig:
  """The warm start's Adam: `warm_start.learning_rate` after SFT_WARMUP_STEPS, then
  constant, or (`warm_start.schedule`) cosine-decayed to 0 over all of its steps: the
  copy curriculum's (`copy_steps + window_copy_steps`) and the SFT's on `num_sequences`
  demonstrations."""
  total_steps = (int(ws.copy_steps) + int(ws.window_copy_steps)
                 + sft_steps(num_sequences, sft_config))
  return OptimizerConfig(learning_rate=float(ws.learning_rate),
                         weight_decay=SFT_WEIGHT_DECAY, warmup_steps=SFT_WARMUP_STEPS,
                         schedule=str(ws.schedule), total_steps=total_steps)


def _learn_to_copy(role: str, state, layout, demonstrations, steps: int, window_steps: int,
                   sft_config: SFTConfig, pad_id: int) -> tuple[Any, dict[str, Any]]:
  """The copy curriculum: `steps` SFT steps of random-token copies over the
  demonstrations' token ids, then `window_steps` of copies inside their own windows."""
  started = time.perf_counter()
  rows = sft_config.batch_rows
  # Windows as long as the longest demonstration, at most COPY_LENGTH.
  window = min(COPY_LENGTH, max(len(d.ids) for d in demonstrations))
  phases = {
      "random": (steps, lambda: copy_sequences(
          steps * rows, demonstration_token_ids(demonstrations),
          length=COPY_LENGTH, seed=sft_config.seed)),
      "windows": (window_steps, lambda: window_sequences(
          window_steps * rows, demonstrations, length=window, seed=sft_config.seed)),
  }
  config = SFTConfig(epochs=1, batch_rows=rows, buckets=(COPY_LENGTH,),
                     seed=sft_config.seed, nll_every_epoch=False,
                     nll_sequences=NLL_SEQUENCES,
                     micro_batch_size=sft_config.micro_batch_size)
  summary: dict[str, Any] = {}
  for phase, (count, sequences) in phases.items():
    if count:
      state, summary[phase] = sft(
          state, layout, sequences(), config, pad_id=pad_id,
          progress=PhaseProgress(f"copy curriculum {role} ({phase})", log))
      log(f"copy curriculum {role} ({phase}): {summary[phase]['steps']} steps, NLL "
          f"{summary[phase]['nll'][0]:.2f} -> {summary[phase]['nll'][-1]:.3f}")
  summary["seconds"] = time.perf_counter() - started
  log(f"copy curriculum {role}: {summary['seconds']:.0f} s")
  return state, summary


def with_init_checkpoints(config, mode: Mode, dirs: dict[str, str]):
  """A copy of `config` whose agents start from `dirs` (keys already set are kept);
  `mode` is its `experiment.mode`."""
  config = copy.deepcopy(config)
  for role, directory in dirs.items():
    if not config[role].model.init_checkpoint:
      config[role].model.init_checkpoint = directory
  if "sub" not in dirs and mode.shared:
    config.sub.model.init_checkpoint = config.main.model.init_checkpoint
  return config
