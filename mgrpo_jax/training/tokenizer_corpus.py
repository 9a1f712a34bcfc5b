"""The text a world's SentencePiece tokenizer is trained on: what the agents read and write.

Pages, training questions and system prompts are what the agents *read*; without what
they *write* (tool-call JSON, thinking phrases, sub-tasks, reports) and the tools' own
output (search hits, "(page 203)"), a small vocabulary is spent on the syllables of
entity names and the protocol falls apart into characters: `{"name": "visit"` becomes
`{ " n ame ": " v is it "`, and a demonstration is 20% longer than it needs to be
(docs/RESULTS.md, "The natural-language world"). So the corpus also holds the
transcripts of `TRANSCRIPT_QUESTIONS` training questions played by the noisy scripted
agents, the same ones the warm start demonstrates, rendered turn by turn as the agents'
protocol text.

The protocol's fixed strings (`protocol_symbols`: ChatML role headers, system prompts,
the constant parts of the first user messages, tool-call openings, the scripted
thoughts) are user-defined symbols of the tokenizer, one token each: a turn costs its
decisions and its copied values, not its boilerplate. A symbolic-world M rollout of
three delegations is 262 tokens with them split into learned pieces and about 100 with
them as symbols (docs/RESULTS.md).

What the corpus and the tokenizer are built from is resolved once from the run's config:
`TokenizerSetup.from_config`.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.oracle_policy import oracle_thoughts, render_oracle_action
from mgrpo_jax.tasks import datasets as datasets_lib
from mgrpo_jax.tasks.oracle import Action
from mgrpo_jax.tasks.oracle.episode import Episode, run_episode
from mgrpo_jax.tasks.world_setup import NoiseSettings, WorldSetup, noisy_oracles
from mgrpo_jax.text.chat import Role
from mgrpo_jax.tools import SearchIndex, default_registry

ROLES = ("main", "sub", "single")
_SPACE = "\u2581"  # how SentencePiece writes a space inside a piece

# Training questions whose scripted transcripts join the corpus (about 0.2 s of work).
TRANSCRIPT_QUESTIONS = 400


def episode_text(episode: Episode) -> str:
  """M's turns, observations and answer, then each delegation's sub-task, S's turns,
  observations and report, each turn as the protocol text the agent writes."""
  parts = []
  for step in episode.main_steps:
    parts += [render_oracle_action(step.action), step.observation]
  if episode.answer is not None:
    parts.append(render_oracle_action(Action.answer(episode.answer)))
  for call in episode.sub_calls:
    parts.append(call.subtask)
    for step in call.steps:
      parts += [render_oracle_action(step.action), step.observation]
    parts.append(render_oracle_action(Action.report(call.report)))
  return "\n".join(parts)


@dataclasses.dataclass(frozen=True)
class TokenizerSetup:
  """What the world's tokenizer is trained from, resolved once from the run's config.

  Attributes:
    world: the run's world: its pages, its training questions, its rendering's symbols
      and `tokenizer_vocab_size`.
    system: `prompts.system` ("full" or "short"): whose system prompts become symbols.
    noise: the scripted agents' mistakes in the transcripts (`warm_start.*`: those the
      warm start demonstrates).
    search_top_n: search hits per call in the transcripts (`tools.search_top_n`).
    visit_chars: characters a visit shows in the transcripts (`tools.visit_chars`).
  """

  world: WorldSetup
  system: str
  noise: NoiseSettings
  search_top_n: int
  visit_chars: int

  @classmethod
  def from_config(cls, config: Any) -> TokenizerSetup:
    """The setup of the run's `config` (`world.*`, `prompts.system`, `warm_start`'s
    mistake rates, `tools.*`)."""
    return cls(world=WorldSetup.from_config(config), system=str(config.prompts.system),
               noise=NoiseSettings.from_config(config),
               search_top_n=int(config.tools.search_top_n),
               visit_chars=int(config.tools.visit_chars))


def tokenizer_corpus(setup: TokenizerSetup) -> list[str]:
  """Documents for the tokenizer of `setup.world` (module docstring), in a fixed order."""
  world = setup.world
  rendering = world.rendering
  train_world, _ = world.split_worlds()
  spec = datasets_lib.WorldSpec(world.size, world.seed, world.test_seed,
                                render=rendering.name)
  pages = rendering.render_pages(train_world)
  questions = [q for _, q in datasets_lib.split_questions(spec, "train")]
  corpus = [p.text for p in pages] + [q.text for q in questions]
  corpus += [specs.spec_for(role, style).system_prompt()
             for role in ROLES for style in specs.SYSTEM_STYLES]
  main, sub = noisy_oracles(world, setup.noise, world.seed)
  index = SearchIndex.from_pages(pages)
  try:
    registry = default_registry(index, top_n=setup.search_top_n,
                                visit_budget=setup.visit_chars)
    corpus += [episode_text(run_episode(q.text, main, sub, registry))
               for q in questions[:TRANSCRIPT_QUESTIONS]]
  finally:
    index.close()
  return corpus


def protocol_symbols(style: str) -> tuple[str, ...]:
  """The protocol's fixed strings, as SentencePiece user-defined symbols (module docstring).

  Args:
    style: `prompts.system` ("full" or "short"): whose system prompts become symbols.

  Returns:
    distinct strings, spaces written as U+2581: role headers ("assistant\\n"), each
    agent's system prompt, the literal parts of its first user message ("Task: "), the
    opening of every tool call up to its first argument's value
    (`{"name": "visit", "arguments": {"page": "`), the separator before any other
    argument, the closing `"}}`, and the scripted agents' thinking phrases.
  """
  agents = [specs.spec_for(role, style) for role in ROLES]
  tools = {tool.name: tuple(tool.parameters["properties"]) for spec in agents
           for tool in spec.tools}
  out = [f"{role.name.lower()}\n" for role in Role]
  out += [spec.system_prompt() for spec in agents]
  for spec in agents:
    out += [literal for literal, *_ in string.Formatter().parse(spec.user_template) if literal]
  for name, arguments in tools.items():
    out += [f'{{"name": "{name}", "arguments": {{"{argument}": "' for argument in arguments]
    out += [f'", "{argument}": "' for argument in arguments]
  out += ['"}}', *oracle_thoughts(sorted(tools))]
  return tuple(dict.fromkeys(s.replace(" ", _SPACE) for s in out))
