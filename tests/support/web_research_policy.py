"""Scripted agents for web tests: the untrained models' thinking + a fixed web routine.

A random tiny model never writes a well-formed tool call, so S would never search. This
wrapper (bound with gin, `mgrpo_jax.training.rollout_policy.wrapper =
@web_research_policy.WebThinkingOracle`) keeps the model in the loop as the trainer
tests' policy mix does (`agents.thinking_oracle.ThinkingOraclePolicy`: one model-sampled
thinking id, then the scripted action; with more, a random model now and then spells a
protocol tag in its thinking, a format error that would make the counts below vary),
with agents that need no gold path:

- M delegates its question as it stands, then answers with the first `ANSWER_CHARS`
  characters of S's report;
- S searches its sub-task, visits the first hit by its title (the mistake of an agent
  that copies the wrong part of a hit: a `bad_url` failure, never sent), then by its
  URL, and reports the page's first `REPORT_CHARS` characters.

So every S call makes exactly one search, one bad visit and one good visit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import gin

from mgrpo_jax.agents.thinking_oracle import ThinkingOraclePolicy
from mgrpo_jax.tasks.oracle import Action, Step

THINKING_TOKENS = 1
REPORT_CHARS = 160
ANSWER_CHARS = 80
_FIRST_HIT = re.compile(r"^1\. (?P<title>.*?) \((?P<url>https?://[^)\s]+)\):", re.MULTILINE)


class WebMain:
  """M's routine (module docstring)."""

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    if not history:
      return Action.delegate(question)
    return Action.answer(" ".join(history[-1].observation.split())[:ANSWER_CHARS] or "unknown")


class WebSub:
  """S's routine (module docstring); a search without hits is reported as such."""

  def next_action(self, subtask: str, history: Sequence[Step]) -> Action:
    if not history:
      return Action.tool("search", query=subtask)
    hit = _FIRST_HIT.search(history[0].observation)
    if hit is None:
      return Action.report("no results")
    if len(history) == 1:
      return Action.tool("visit", page=hit["title"])
    if len(history) == 2:
      return Action.tool("visit", page=hit["url"])
    return Action.report(history[-1].observation[:REPORT_CHARS])


@gin.configurable
def WebThinkingOracle(model_policy, tokenizer, role: str) -> ThinkingOraclePolicy:  # noqa: N802 (gin name)
  """The mix for one agent (`role` "main" or "sub"); its version is the model's."""
  return ThinkingOraclePolicy(model_policy, WebSub() if role == "sub" else WebMain(),
                              tokenizer, thinking_tokens=THINKING_TOKENS)
