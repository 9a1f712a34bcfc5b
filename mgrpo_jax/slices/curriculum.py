"""The paper's two-stage curriculum (its section 5.1): stage 2 on what stage 1 cannot do.

With `curriculum.stage2_steps` = N2 > 0, `--slice=all` runs, after this run's stages
(stage 1: warm start, RL on `world.stage`, evaluations, report):

  select   (a `--slice=all --stage=select_stage2` child) the stage-1 agents' final
           weights become parameter checkpoints `<workdir>/stage2/init/<role>`; each
           training question of stage 2 (`world.stage=stage2`, `curriculum.stage2_types`)
           is rolled out `curriculum.success_samples` times at the agents' sampling
           temperature, and the questions answered right at most
           `curriculum.success_threshold` of the time are kept
           (`tasks.questions.low_success_filter`): `<workdir>/stage2/selection.json`
           holds every question's success rate and the kept ids;
  stage 2  a child run in `<workdir>/stage2` (`stage2_config`): no warm start, the agents
           start from `stage2/init`, RL for N2 steps on the kept questions only
           (`world.question_ids`), evaluated on stage 2's held-out questions before (the
           stage-1 agents) and after, with its own report.

A finished run may be continued with stage 2 (`curriculum.*` may change when a run
resumes: stage 2 is its own run, with its own fingerprint); a selection made with other
`curriculum.success_*` values is refused by name (`check_selection`).

The paper measures stage 2's success under the untrained system; the released code's
documents describe "selected low-success queries" for its second session. Here the
stage-1 policy's own success rates select them, so stage 2 trains where stage 1 left
the most to learn.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import pathlib

import numpy as np

from mgrpo_jax.config import ConfigError
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.evaluation import held_out
from mgrpo_jax.scale.writers import log
from mgrpo_jax.tasks.questions import low_success_filter
from mgrpo_jax.tasks.train_worlds import training_tasks
from mgrpo_jax.tasks.world_data import ensure_world
from mgrpo_jax.tasks.world_setup import WorldSetup, question_mixture
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.checkpoint import AgentCheckpointer, save_params
from mgrpo_jax.training.judge_setup import run_judges
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from mgrpo_jax.utils.atomic_files import atomic_write

STAGE2 = "stage2"
SELECTION = "selection.json"


def stage2_folder(paths: RunPaths) -> pathlib.Path:
  """`<workdir>/stage2`: stage 2's run folder (local: stage 2 reads its init from it)."""
  return paths.local / STAGE2


def stage2_config(config, mode: Mode, paths: RunPaths, *, selected: bool = True):
  """Stage 2's config: stage-2 questions (of `curriculum.stage2_types`; with `selected`,
  only the kept ones), `curriculum.stage2_steps` RL steps from the stage-1 agents at
  `curriculum.learning_rate_scale` times their learning rates, no warm start, the run id
  `<run_id>-stage2`, the stage-1 run's tokenizer."""
  config = copy.deepcopy(config)
  folder = stage2_folder(paths)
  config.world.stage = STAGE2
  config.world.question_types = str(config.curriculum.stage2_types)
  config.world.question_ids = str(folder / SELECTION) if selected else ""
  config.experiment.run_id = f"{config.experiment.run_id}-{STAGE2}"
  config.experiment.num_steps = int(config.curriculum.stage2_steps)
  config.curriculum.stage2_steps = 0
  config.warm_start.enabled = False
  config.warm_start.dir = ""
  for role in mode.agents:
    config[role].optim.learning_rate = (float(config[role].optim.learning_rate)
                                        * float(config.curriculum.learning_rate_scale))
    config[role].model.init_checkpoint = str(folder / "init" / role)
    if not config[role].model.tokenizer:
      config[role].model.tokenizer = str(paths.local / "data" / "tokenizer")
  return config


def check_stage2(config, mode: Mode, paths: RunPaths) -> None:
  """Fails before stage 1 (a ValueError naming the key) when stage 2's question types are
  not in the rendering's stage-2 mixture."""
  question_mixture(WorldSetup.from_config(stage2_config(config, mode, paths, selected=False)))


def check_selection(config, folder: pathlib.Path) -> None:
  """Raises ConfigError naming the key when `folder`'s selection was made with another
  `curriculum.success_threshold` or `curriculum.success_samples` than `config`'s."""
  selection = json.loads((folder / SELECTION).read_text())
  for key, field, cast in (("success_threshold", "threshold", float),
                           ("success_samples", "samples", int)):
    value = cast(config.curriculum[key])
    if selection[field] != value:
      raise ConfigError(f"config key 'curriculum.{key}' is {value!r}, but stage 2's "
                        f"questions in {folder / SELECTION} were chosen with "
                        f"{selection[field]!r}")


def run_selection_stage(config, mode: Mode, workdir: str) -> dict:
  """The `select` stage (module docstring), in its own process; returns the selection
  (`mode`: the config's `experiment.mode`)."""
  paths = RunPaths.from_config(config, workdir)
  folder = stage2_folder(paths)
  for role in mode.agents:
    _export_final_params(config, role, paths, folder / "init" / role)
  candidates = stage2_config(config, mode, paths, selected=False)
  world = WorldSetup.from_config(candidates)
  tasks = training_tasks(world, ensure_world(paths.local, world, log),
                         functools.partial(agent_setup.index_tool_registry, config=candidates))
  rates = success_rates(candidates, mode, paths.local, tasks,
                        {role: held_out.Source(str(folder / "init" / role), "params")
                         for role in mode.agents})
  curriculum = config.curriculum
  by_id = {q.id: q for q in tasks.questions}
  kept = low_success_filter(tasks.questions, lambda q: rates[q.id],
                            float(curriculum.success_threshold))
  selection = {"threshold": float(curriculum.success_threshold),
               "samples": int(curriculum.success_samples),
               "candidates": len(tasks.questions), "kept": [q.id for q in kept],
               "mean_rate": float(np.mean(list(rates.values()))),
               "rates": {qid: rates[qid] for qid in by_id}}
  atomic_write(folder / SELECTION, json.dumps(selection, indent=1).encode())
  log(f"stage 2: kept {len(kept)} of {len(tasks.questions)} stage-2 training questions "
      f"(success rate <= {selection['threshold']} under the stage-1 agents, mean "
      f"{selection['mean_rate']:.3f})")
  return selection


def success_rates(config, mode: Mode, root: pathlib.Path, tasks,
                  sources: dict[str, held_out.Source]) -> dict[str, float]:
  """{question id: fraction of `curriculum.success_samples` sampled rollouts answered
  right} of `tasks.questions` under the agents `sources` names.

  The questions are rolled out a chunk at a time, about an RL step's B x K rollouts each
  (so a chunk's sampling programs are RL's, and no batch outgrows the sampler's buckets),
  each chunk with its own key."""
  tokenizer = functools.partial(agent_setup.world_tokenizer, root,
                                TokenizerSetup.from_config(config))
  main = held_out.load_agent(AgentSetup.from_config(config, "main"), tokenizer, sources["main"])
  sub = None
  if mode.sub_agent:
    sub = main if mode.shared else held_out.load_agent(AgentSetup.from_config(config, "sub"),
                                                       tokenizer, sources["sub"])
  main_spec, sub_spec = agent_setup.agent_specs(config, mode)
  setup = held_out.EvalSetup(mode=mode, registry=tasks.registry,
                             rollout_config=agent_setup.rollout_config(config),
                             questions=tasks.questions, main_spec=main_spec,
                             sub_spec=sub_spec,
                             rendering=WorldSetup.from_config(config).rendering,
                             answer_judge=run_judges(config, root, None, tokenizer).answer)
  samples = int(config.curriculum.success_samples)
  rollouts = int(config.mgrpo.queries_per_step) * int(config.mgrpo.rollouts_per_query)
  chunk = max(1, rollouts // samples)
  outcomes: dict[str, list[float]] = {q.id: [] for q in tasks.questions}
  for start in range(0, len(tasks.questions), chunk):
    result = held_out.evaluate(
        dataclasses.replace(setup, questions=tasks.questions[start:start + chunk]), main, sub,
        samples=samples,
        key=agent_setup.derive_seed(int(config.experiment.seed), "stage2_selection", start))
    for record in result.main:
      outcomes[record.query_id].append(float(record.correct))
  return {qid: float(np.mean(values)) for qid, values in outcomes.items()}


def _export_final_params(config, role: str, paths: RunPaths, out: pathlib.Path) -> None:
  """The newest RL checkpoint of `role` as a parameter checkpoint in `out` (kept)."""
  if (out / "0").exists():
    return
  setup = AgentSetup.from_config(config, role)
  model, _ = agent_setup.build_model(
      setup, functools.partial(agent_setup.world_tokenizer, paths.local,
                               TokenizerSetup.from_config(config)))
  trainer = agent_setup.create_agent_state(model, setup)
  with AgentCheckpointer(paths.checkpoints(role), trainer.layout) as checkpointer:
    restored = checkpointer.restore()
  if restored is None:
    raise FileNotFoundError(f"stage 2: no {role} checkpoint of stage 1 in "
                            f"{paths.checkpoints(role)}")
  state, _ = restored
  save_params(out, state.params, metadata={"stage1_step": int(state.step)})
