"""Held-out evaluation: the agents' accuracy on the test world (unseen entities).

`evaluate` runs the mode's rollout controller in one process (S in-process, no RPC)
over the test questions of the configured stage, `samples` rollouts per question at
the agents' sampling temperature, scores answers with the run's answer judge
(`rewards.answer_judge`: exact match by default) and S's reports with its expert judge,
and summarizes:

  accuracy           mean over questions of the per-question mean correctness
  accuracy_ci95      half-width of the 95% interval of that mean (normal, over questions)
  accuracy_by_type   the same per question type (lookup, multihop, count, puzzle, ...)
  format_rate        fraction of rollouts that ended with a well-formed result
  sub_calls_mean     delegations per rollout (0 for the single agent)
  tool_calls_mean    executed calls per rollout of each tool, by name (M's or the single
                     agent's own, plus S's search/visit under "sub/<name>")
  examples           a few decoded trajectories (M, and S's first call)
  copy diagnostics   (`copy_rates`) first_action_oracle_rate: M's first tool call equals
                     the clean scripted oracle's first action (right tool, sub-task or
                     expression copied right); sub_query_copy_rate: S's first call
                     equals the clean S oracle's (the natural world's searches its
                     sub-task verbatim, the symbolic world's visits its entity). They
                     measure the copying that answers are built from, before any
                     answer is right.
  sub_expert_mean    S's reports scored by the expert judge (the paper's r_expert: 1
                     for a true fact of the question's path, 0.5 true but off it, 0
                     false or no report), the mean over S's calls; the test world's
                     gold-path judge needs a generated world (it knows the facts), a
                     model judge (`rewards.expert_judge=model`) does not
  sub_expert_by_property  the same per property the sub-task asks for ("boss", "year",
                     ...; "other" for a sub-task of no canonical form): where S's
                     mistakes sit, without reading trajectories
  temperature        the temperature of the sampled rollouts (`eval.temperature`, else
                     the agents' own, as in RL)
  top_p              the nucleus mass the sampled rollouts kept (`eval.top_p`, else the
                     agents' own; 1: the whole distribution)
  greedy             accuracy, its interval and per-type accuracy of one greedy
                     rollout per question (temperature 0), and S's r_expert as above:
                     what the policies' most likely actions achieve, next to the
                     sampled numbers above.
  turn_accuracy      per trained role, the fraction of the clean oracles' turns on the
                     same test questions that the agent's greedy decoding would write
                     from the demonstrated history (`turn_accuracy.py`): each turn of
                     the chain alone, without sampling noise.
  demonstrated_turn_accuracy
                     the same on the turns of the warm start's noisy oracles (its
                     demonstrations' mistakes and all): how closely the agent imitates
                     what it was fine-tuned on; its "ceiling" is the best any model can
                     reach there, the mistakes being drawn per task
                     (`imitation_ceiling.py`: 1 without mistakes).

What the agents are evaluated in (the mode, the world's tools and questions, the agents'
limits and prompts, the world's rendering and expert judge) is one `EvalSetup`.
`evaluate_sources` builds the policies from orbax checkpoints (the warm start's
parameters, or the RL run's latest state) so the same numbers come out for any stage.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.inline_oracle import InlineOracle
from mgrpo_jax.agents.modes import Agent, make_controller
from mgrpo_jax.agents.records import MainRecord, SubRecord
from mgrpo_jax.agents.scoring import score
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.evaluation import turn_accuracy
from mgrpo_jax.evaluation.imitation_ceiling import CeilingScorer
from mgrpo_jax.scale.writers import log
from mgrpo_jax.tasks.judges import AnswerJudge, ExactMatchJudge, ExpertJudge
from mgrpo_jax.tasks.oracle import Action
from mgrpo_jax.tasks.renderings import NATURAL, Rendering
from mgrpo_jax.tasks.world_data import ensure_world, load_questions
from mgrpo_jax.tasks.world_setup import NoiseSettings, WorldSetup, noisy_oracles
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import TaskRoutedRegistry, ToolRegistry
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.checkpoint import AgentCheckpointer, restore_params
from mgrpo_jax.training.judge_setup import run_judges
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from mgrpo_jax.warm_start.demonstrations import Demonstrators, collect_demonstrations

NUM_EXAMPLES = 2
# The keys of the greedy pass's summary kept under "greedy".
GREEDY_KEYS = ("accuracy", "accuracy_ci95", "accuracy_by_type", "format_rate",
               "sub_expert_mean", "sub_expert_by_property")
# The `sub_expert_by_property` key of a sub-task of no canonical form.
OTHER_PROPERTY = "other"

# The world whose tools and facts each `eval.split` asks about.
_SPLIT_WORLDS = {"test": "test_world", "validation": "train_world"}


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """The summary (module docstring), the scored records it came from and the evaluated
  questions by id."""
  summary: dict[str, Any]
  main: list[MainRecord]
  sub: list[SubRecord]
  questions: dict[str, Any] = dataclasses.field(default_factory=dict)


def summarize(main: Sequence[MainRecord], sub: Sequence[SubRecord], questions,
              tokenizer=None, sub_tokenizer=None, rendering: Rendering = NATURAL
              ) -> dict[str, Any]:
  """The summary of scored records (module docstring); `questions` maps id -> question.

  The examples decode M's trajectories with `tokenizer` and S's with `sub_tokenizer`
  (default `tokenizer`); without `tokenizer` the summary has no examples.
  """
  if not main:
    raise ValueError("summarize got no records")
  per_question: dict[str, list[float]] = collections.defaultdict(list)
  for record in main:
    per_question[record.query_id].append(float(record.correct))
  means = np.array([np.mean(v) for v in per_question.values()])
  by_type: dict[str, list[float]] = collections.defaultdict(list)
  for qid, values in per_question.items():
    by_type[questions[qid].type].append(float(np.mean(values)))
  tools: collections.Counter = collections.Counter()
  for record in main:
    tools.update(c.name for c in record.trajectory.tool_calls)
  for record in sub:
    tools.update(f"sub/{c.name}" for c in record.trajectory.tool_calls)
  n = len(main)
  ci = 1.96 * float(np.std(means, ddof=1)) / np.sqrt(len(means)) if len(means) > 1 else 0.0
  summary = {
      "num_questions": len(per_question),
      "num_rollouts": n,
      "accuracy": float(np.mean(means)),
      "accuracy_ci95": float(ci),
      "accuracy_by_type": {t: float(np.mean(v)) for t, v in sorted(by_type.items())},
      "format_rate": float(np.mean([r.trajectory.format_ok for r in main])),
      "sub_calls_mean": float(np.mean([r.num_sub_calls for r in main])),
      "tool_calls_mean": {name: count / n for name, count in sorted(tools.items())},
  }
  summary.update(copy_rates(main, sub, questions, rendering))
  if tokenizer is not None:
    sub_tokenizer = sub_tokenizer or tokenizer
    examples = []
    for record in main[:NUM_EXAMPLES]:
      calls = [s for s in sub if (s.query_id, s.rollout_index) == record.key]
      examples.append({
          "question": questions[record.query_id].text,
          "gold": questions[record.query_id].answer,
          "correct": float(record.correct),
          "main": tokenizer.decode(record.trajectory.ids.tolist()),
          "sub": sub_tokenizer.decode(calls[0].trajectory.ids.tolist()) if calls else ""})
    summary["examples"] = examples
  return summary


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSetup:
  """What the agents are evaluated in.

  Attributes:
    mode: the mode whose rollout controller plays the questions.
    registry: the tools of the world the questions ask about.
    rollout_config: the agents' limits (turns, context, new tokens, sub-calls).
    questions: the evaluated questions.
    main_spec: M's (or the single agent's) prompts and tools.
    sub_spec: S's prompts and tools.
    rendering: the world's rendering (copy diagnostics, sub-task properties, oracles).
    expert_judge: r_expert of the world `registry` serves (None: S's reports are not
      scored).
    answer_judge: r_correct of M's answers.
  """

  mode: Mode
  registry: ToolRegistry | TaskRoutedRegistry
  rollout_config: RolloutConfig
  questions: Sequence[Any]
  main_spec: specs.AgentSpec
  sub_spec: specs.AgentSpec
  rendering: Rendering = NATURAL
  expert_judge: ExpertJudge | None = None
  answer_judge: AnswerJudge = dataclasses.field(default_factory=ExactMatchJudge)


def evaluate(setup: EvalSetup, main: Agent, sub: Agent | None, *, samples: int,
             key: int) -> EvalResult:
  """Rollouts of `setup.questions` (`samples` each), scored and summarized; with
  `setup.expert_judge`, S's reports are scored too."""
  controller = make_controller(setup.mode, main, setup.registry, setup.rollout_config,
                               sub=sub if setup.mode.sub_agent else None,
                               main_spec=setup.main_spec, sub_spec=setup.sub_spec)
  out = controller.run(list(setup.questions), samples, key)
  by_id = {q.id: q for q in setup.questions}
  expert_judge, rendering = setup.expert_judge, setup.rendering
  scored_main, scored_sub = score(out.main, out.sub, by_id, setup.answer_judge, expert_judge)
  summary = summarize(scored_main, scored_sub, by_id, main.tokenizer,
                      sub.tokenizer if sub is not None else None, rendering)
  if expert_judge is not None:
    summary.update(sub_expert_scores(scored_sub, rendering))
  return EvalResult(summary, scored_main, scored_sub, by_id)


def _call_of(action: Action) -> tuple[str, dict[str, Any]] | None:
  """(tool name, arguments) of an oracle action as M would call it; None for a result."""
  if action.kind == "tool":
    return action.name, dict(action.args)
  if action.kind == "delegate":
    return specs.DELEGATE, {"subtask": action.text}
  return None


def _first_call(record: MainRecord | SubRecord) -> tuple[str, Any] | None:
  calls = record.trajectory.tool_calls
  if not calls:
    return None
  try:
    return calls[0].name, json.loads(calls[0].arguments)
  except json.JSONDecodeError:
    return calls[0].name, None


def sub_expert_scores(sub: Sequence[SubRecord], rendering: Rendering = NATURAL
                      ) -> dict[str, Any]:
  """`sub_expert_mean` and `sub_expert_by_property` (module docstring) of S's records
  scored with an expert judge; empty without records."""
  if not sub:
    return {}
  by_property: dict[str, list[float]] = collections.defaultdict(list)
  for record in sub:
    prop = rendering.subtask_property(record.subtask) or OTHER_PROPERTY
    by_property[prop].append(float(record.expert))
  return {"sub_expert_mean": float(np.mean([r.expert for r in sub])),
          "sub_expert_by_property": {p: float(np.mean(v)) for p, v in sorted(by_property.items())}}


def copy_rates(main: Sequence[MainRecord], sub: Sequence[SubRecord], questions,
               rendering: Rendering = NATURAL) -> dict[str, float]:
  """The copy diagnostics of the module docstring (M's only for role "main" records)."""
  rates = {}
  oracle = rendering.main_oracle(0.0, 0)
  sub_oracle = rendering.sub_oracle(0.0, 0)
  delegating = [r for r in main if r.role == "main"]
  if delegating:
    rates["first_action_oracle_rate"] = float(np.mean([
        _first_call(r) == _call_of(oracle.next_action(questions[r.query_id].text, []))
        for r in delegating]))
  if sub:
    rates["sub_query_copy_rate"] = float(np.mean([
        _first_call(r) == _call_of(sub_oracle.next_action(r.subtask, [])) for r in sub]))
  return rates


@dataclasses.dataclass(frozen=True)
class Source:
  """Where an agent's evaluated weights are: a folder and its kind.

  kind: "params" (a parameter checkpoint, e.g. the warm start's) or "state" (an
  `AgentCheckpointer` train state of an RL run: the newest one, or with `step` the
  newest whose step is at most `step`, so an agent that was not trained gives step 0).
  """
  directory: str
  kind: str
  step: int | None = None

  def __post_init__(self):
    if self.kind not in ("params", "state"):
      raise ValueError(f"Source.kind must be 'params' or 'state', got {self.kind!r}")


def load_agent(setup: AgentSetup, world_tokenizer: Callable[[], Tokenizer], source: Source
               ) -> Agent:
  """The agent `setup` describes with the weights `source` names, sampling as it does in
  RL (`world_tokenizer`: as `agent_setup.build_model` takes it)."""
  role = setup.role
  model, tokenizer = agent_setup.build_model(setup, world_tokenizer)
  trainer = agent_setup.create_agent_state(model, setup)
  if source.kind == "params":
    params, _ = restore_params(source.directory, trainer.layout.abstract.params)
  else:
    with AgentCheckpointer(source.directory, trainer.layout) as checkpointer:
      steps = [t for t in checkpointer.all_steps()
               if source.step is None or t <= source.step]
      if not steps:
        raise FileNotFoundError(
            f"evaluation: no {role} checkpoint in {source.directory!r}"
            + ("" if source.step is None else f" at step <= {source.step}"))
      params = checkpointer.restore(steps[-1])[0].params
  policy = agent_setup.sampler_policy(trainer.layout.merge(params), tokenizer,
                                      setup.sampling)
  return Agent(policy, tokenizer)


def held_out_turn_accuracy(setup: EvalSetup, agents: dict[str, Agent],
                           oracles: tuple[Any, Any] | None = None, *,
                           with_ceiling: bool = False) -> dict[str, dict[str, float]]:
  """`turn_accuracy` of each agent in `agents` ("main", "sub") on the trajectories of
  `setup.questions` played by `oracles` (M's and S's scripted policies; default the
  clean ones of `setup.rendering`), the single agent's being M's oracle with S's inline.
  With `with_ceiling`, each role's rates gain "ceiling": the best accuracy any model can
  reach on those turns, whose mistakes are drawn per task (`imitation_ceiling`)."""
  mode, rendering = setup.mode, setup.rendering
  main_oracle, sub_oracle = oracles or (rendering.main_oracle(0.0, 0),
                                        rendering.sub_oracle(0.0, 0))
  scorers: dict[str, CeilingScorer] = {}
  single_oracle = None
  if with_ceiling and mode.single:
    single_oracle = scorers["main"] = CeilingScorer(InlineOracle(main_oracle, sub_oracle))
  elif with_ceiling:
    main_oracle = scorers["main"] = CeilingScorer(main_oracle)
    sub_oracle = scorers["sub"] = CeilingScorer(sub_oracle)
  demonstrators = Demonstrators(
      main_oracle=main_oracle, sub_oracle=sub_oracle, main_spec=setup.main_spec,
      sub_spec=setup.sub_spec, single_oracle=single_oracle,
      sub_tokenizer=agents["sub"].tokenizer if "sub" in agents else None)
  demos = collect_demonstrations(agents["main"].tokenizer, setup.registry,
                                 setup.rollout_config, setup.questions,
                                 demonstrators=demonstrators, mode=mode.demonstration)
  sequences = {"main": demos.main, "sub": demos.sub}
  rates = {role: turn_accuracy.turn_accuracy(
               agent.policy.sampler.model, sequences[role], agent.tokenizer,
               mode.main_role if role == "main" else role)
           for role, agent in agents.items() if sequences[role]}
  for role, scorer in scorers.items():
    if role in rates:
      rates[role]["ceiling"] = scorer.ceiling
  return rates


def evaluation_seed(config) -> int:
  """The key of the held-out rollouts of a run of `config` (greedy and sampled)."""
  return agent_setup.derive_seed(int(config.experiment.seed), "eval")


def evaluation_inputs(config, mode: Mode, world: WorldSetup, root: str | pathlib.Path,
                      sources: dict[str, Source]) -> tuple[EvalSetup, Agent, Agent | None]:
  """What `evaluate_sources` evaluates: the `EvalSetup` of the config's `eval.split`
  questions of `world` (the config's, resolved by the caller; built under `root` with
  the tokenizer if missing), M and S (None without a sub-agent; M itself when shared)
  with the weights `sources` names, sampling at their configured temperature."""
  root = pathlib.Path(root)
  world_path = ensure_world(root, world, log)
  split = str(config.eval.split)
  questions = load_questions(world_path, world, world.stage,
                             split=split)[:int(config.eval.num_questions)]
  registry = agent_setup.tool_registry(world_path, config, world=_SPLIT_WORLDS[split])
  tokenizer = functools.partial(agent_setup.world_tokenizer, root,
                                TokenizerSetup.from_config(config))
  main = load_agent(AgentSetup.from_config(config, "main"), tokenizer, sources["main"])
  sub = None
  if mode.sub_agent:
    sub = main if mode.shared else load_agent(AgentSetup.from_config(config, "sub"),
                                              tokenizer, sources["sub"])
  main_spec, sub_spec = agent_setup.agent_specs(config, mode)
  judges = run_judges(config, root, held_out_expert_judge(world, split), tokenizer)
  setup = EvalSetup(mode=mode, registry=registry,
                    rollout_config=agent_setup.rollout_config(config), questions=questions,
                    main_spec=main_spec, sub_spec=sub_spec, rendering=world.rendering,
                    expert_judge=judges.expert, answer_judge=judges.answer)
  return setup, main, sub


def evaluate_sources(config, mode: Mode, root: str | pathlib.Path, sources: dict[str, Source],
                     *, greedy_only: bool = False) -> EvalResult:
  """Held-out evaluation in `mode` (the config's `experiment.mode`) of the agents whose
  weights `sources` names ("main", "sub").

  With `greedy_only`, only the greedy pass runs (one rollout per question; its summary
  is the result's, and also under "greedy"): the cheap points of the RL curve.
  """
  world = WorldSetup.from_config(config)
  setup, main, sub = evaluation_inputs(config, mode, world, root, sources)
  run = functools.partial(evaluate, setup, key=evaluation_seed(config))
  greedy_main, greedy_sub = greedy_agents(main, sub)
  greedy_result = run(main=greedy_main, sub=greedy_sub, samples=1)
  greedy_summary = {key: greedy_result.summary[key] for key in GREEDY_KEYS
                    if key in greedy_result.summary}
  if greedy_only:
    greedy_result.summary["greedy"] = greedy_summary
    return greedy_result
  main, sub = sampled_agents(main, sub, temperature=float(config.eval.temperature),
                             top_p=float(config.eval.top_p))
  result = run(main=main, sub=sub, samples=int(config.eval.samples))
  result.summary["greedy"] = greedy_summary
  result.summary["split"] = str(config.eval.split)
  result.summary["temperature"] = main.policy.params.temperature
  result.summary["top_p"] = main.policy.params.top_p
  agents = {"main": main} if sub is None else {"main": main, "sub": sub}
  result.summary["turn_accuracy"] = held_out_turn_accuracy(setup, agents)
  if world.source == "generated":
    result.summary["demonstrated_turn_accuracy"] = held_out_turn_accuracy(
        setup, agents, oracles=noisy_oracles(world, NoiseSettings.from_config(config),
                                             int(config.experiment.seed)),
        with_ceiling=True)
  return result


def held_out_expert_judge(world: WorldSetup, split: str) -> ExpertJudge | None:
  """The expert judge of the generated world the `split` (`eval.split`) asks about: the
  test world, or the training world for the validation split; None for questions from
  a file (`world.source`), whose facts no judge knows."""
  if world.source != "generated":
    return None
  return world.rendering.expert_judge(world.split_worlds()[_SPLIT_WORLDS[split] == "test_world"])


def with_sampling(agent: Agent, **changes: Any) -> Agent:
  """The same agent (its sampler shared) with `changes` to its `SamplingParams`."""
  policy = agent.policy
  params = dataclasses.replace(policy.params, **changes)
  return Agent(type(policy)(policy.sampler, params, version=policy.version), agent.tokenizer)


def _both(main: Agent, sub: Agent | None, **changes: Any) -> tuple[Agent, Agent | None]:
  """M and S (None, or M itself when shared), each `with_sampling(changes)`."""
  new_main = with_sampling(main, **changes)
  return new_main, (None if sub is None else new_main if sub is main
                    else with_sampling(sub, **changes))


def greedy_agents(main: Agent, sub: Agent | None) -> tuple[Agent, Agent | None]:
  """M and S (None, or M itself when shared) decoding greedily."""
  return _both(main, sub, temperature=0.0)


def sampled_agents(main: Agent, sub: Agent | None, *, temperature: float, top_p: float
                   ) -> tuple[Agent, Agent | None]:
  """M and S sampling at `temperature` from the smallest set of tokens whose mass reaches
  `top_p` (`eval.temperature`, `eval.top_p`); a 0 keeps the agents' own value."""
  changes = {name: value for name, value in (("temperature", temperature), ("top_p", top_p))
             if value}
  return _both(main, sub, **changes) if changes else (main, sub)
