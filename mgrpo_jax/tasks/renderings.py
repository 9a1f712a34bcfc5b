"""The two renderings of the deep-research world, selected by `world.render`.

  natural   invented multi-syllable names in encyclopedia sentences, natural-language
            questions, sub-tasks and reports (`world`, `pages`, `questions`,
            `statements`, `oracle`, `judges`): for pretrained models, which copy.
  symbolic  one token per name, relation, value and page id, compact pages
            (`tasks.symbolic`): for small models trained from scratch on a CPU.

A `Rendering` is everything outside `tasks/` needs to know of a world: how to generate
the train and test worlds, render pages, draw questions, build the scripted oracles
(clean or with systematic mistakes) and the expert judge, and which strings the
tokenizer must keep whole. Training, evaluation and the tokenizer ask for
`get_rendering(name)` and never look at a world's insides.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from mgrpo_jax.tasks import judges, pages, questions, statements, world
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent
from mgrpo_jax.tasks.oracle import noise as natural_noise
from mgrpo_jax.tasks.symbolic import judge as symbolic_judge
from mgrpo_jax.tasks.symbolic import language as symbolic_language
from mgrpo_jax.tasks.symbolic import oracle as symbolic_oracle
from mgrpo_jax.tasks.symbolic import questions as symbolic_questions
from mgrpo_jax.tasks.symbolic import vocabulary
from mgrpo_jax.tasks.symbolic import world as symbolic_world

RENDERINGS = ("natural", "symbolic")


@dataclasses.dataclass(frozen=True)
class Rendering:
  """One rendering's world functions (module docstring).

  Attributes:
    name: "natural" or "symbolic".
    check_size: size -> entity count, or ValueError naming `world.size`.
    generate: (size, seed, exclude_names) -> world; `exclude_names` is honoured by
      renderings whose worlds have their own names (natural), ignored by the shared pool.
    render_pages: world -> [Page] (page id = entity id).
    synthesize: (world, n, *, stage, seed, id_prefix) -> [Question].
    stages: stage number (1, 2) -> its question-type `Mixture`.
    main_oracle: (rate, seed, rates=()) -> M's scripted policy; rate 0 is the clean
      oracle, `rates` ((mistake, rate) pairs) overrides `rate` per mistake.
    sub_oracle: (rate, seed, rates=()) -> S's scripted policy.
    main_mistakes: the names of M's systematic mistakes (keys of `rates`).
    sub_mistakes: the names of S's systematic mistakes.
    expert_judge: world -> `judges.ExpertJudge`.
    subtask_property: a sub-task's text -> the property it asks for ("boss", "year",
      ...), or None for a sub-task of no canonical form.
    symbols: strings the tokenizer keeps as one token each.
    disjoint_test_names: whether the test world avoids every train-world name.
  """
  name: str
  check_size: Callable[[str], int]
  generate: Callable[[str, int, frozenset], Any]
  render_pages: Callable[[Any], list[pages.Page]]
  synthesize: Callable[..., list[questions.Question]]
  stages: dict[int, questions.Mixture]
  main_oracle: Callable[..., Any]
  sub_oracle: Callable[..., Any]
  main_mistakes: tuple[str, ...]
  sub_mistakes: tuple[str, ...]
  expert_judge: Callable[[Any], judges.ExpertJudge]
  subtask_property: Callable[[str], str | None]
  symbols: tuple[str, ...] = ()
  disjoint_test_names: bool = True

  def split_worlds(self, size: str, seed: int, test_seed: int) -> tuple[Any, Any]:
    """(train world, test world) of this rendering."""
    return _split_worlds(self.name, str(size), int(seed), int(test_seed))


NATURAL = Rendering(
    "natural",
    check_size=world.resolve_size,
    generate=lambda size, seed, exclude: world.generate_world(size, seed,
                                                              exclude_names=exclude),
    render_pages=pages.render_pages,
    synthesize=questions.synthesize,
    stages=questions.STAGES,
    main_oracle=lambda rate, seed, rates=(): OracleMainAgent(
        natural_noise.MainNoise(rate=rate, seed=seed, rates=tuple(rates))),
    sub_oracle=lambda rate, seed, rates=(): OracleSubAgent(
        natural_noise.SubNoise(rate=rate, seed=seed, rates=tuple(rates))),
    main_mistakes=natural_noise.MAIN_MISTAKES,
    sub_mistakes=natural_noise.SUB_MISTAKES,
    expert_judge=judges.ProgrammaticExpertJudge,
    subtask_property=lambda text: (statements.parse_subtask(text) or (None,))[0])

SYMBOLIC = Rendering(
    "symbolic",
    check_size=symbolic_world.resolve_size,
    generate=lambda size, seed, exclude: symbolic_world.generate_world(size, seed),
    render_pages=symbolic_world.render_pages,
    synthesize=symbolic_questions.synthesize,
    stages=symbolic_questions.STAGES,
    main_oracle=lambda rate, seed, rates=(): symbolic_oracle.SymbolicMainOracle(
        symbolic_oracle.MainNoise(rate=rate, seed=seed, rates=tuple(rates))),
    sub_oracle=lambda rate, seed, rates=(): symbolic_oracle.SymbolicSubOracle(
        symbolic_oracle.SubNoise(rate=rate, seed=seed, rates=tuple(rates))),
    main_mistakes=symbolic_oracle.MAIN_MISTAKES,
    sub_mistakes=symbolic_oracle.SUB_MISTAKES,
    expert_judge=symbolic_judge.SymbolicExpertJudge,
    subtask_property=lambda text: (symbolic_language.parse_subtask(text) or (None, None))[1],
    symbols=vocabulary.symbols(),
    disjoint_test_names=False)

_BY_NAME = {r.name: r for r in (NATURAL, SYMBOLIC)}


def get_rendering(name: str) -> Rendering:
  """The rendering called `name` (`world.render`)."""
  if name not in _BY_NAME:
    raise ValueError(f"world.render must be one of {RENDERINGS}, got {name!r}")
  return _BY_NAME[name]


@functools.lru_cache(maxsize=4)
def _split_worlds(name: str, size: str, seed: int, test_seed: int):
  rendering = get_rendering(name)
  train = rendering.generate(size, seed, frozenset())
  exclude = frozenset(train.names) if rendering.disjoint_test_names else frozenset()
  return train, rendering.generate(size, test_seed, exclude)
