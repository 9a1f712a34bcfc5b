"""A self-contained HTML page of multi-agent trajectories: data in, an HTML string out.

  html = render("Held-out evaluation: final", questions, notes=["accuracy 0.79"])

Each `Question` is a section with its text, its gold answer and how many of its
rollouts were correct; its rollouts stand side by side, one column each, marked correct
or incorrect, with R_M (and A_M, its group-relative advantage, on a training step's
page), the final answer and how the trajectory ended. A rollout lists M's messages in
order (the system prompt folded away); an assistant turn that delegated holds S's call
nested under it (the sub-task, S's own messages with its tool calls and observations,
its result, R_S and A_S when given, and on a training step's page how the call was
aligned to the D slots: which slot, duplicated into several, or dropped), followed by
the observation M received.

The page has inline CSS only: no script, no network resource. Every text that comes
from a trajectory or a question is HTML-escaped. The markup carries stable hooks for
tools and tests: `section.question[data-query-id]`, `article.rollout[data-rollout]`
(with class `correct` or `incorrect`), `details.sub-call[data-call]`.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class SubCall:
  """S's call `index` of a rollout: its sub-task, messages, result, R_S and A_S (None:
  not computed) and `alignment`, how it filled the D slots ("" when not shown)."""
  index: int
  subtask: str
  messages: tuple[Message, ...]
  final: str | None
  format_ok: bool
  reward: float | None = None
  advantage: float | None = None
  alignment: str = ""


@dataclasses.dataclass(frozen=True)
class Message:
  """One message of a trajectory.

  role: "system", "task" (the first user message), "assistant" or "observation" (a
  tool's output, or S's report, returned to the agent). `tool` names the tool call an
  assistant turn made ("search {...}"), `tool_ok` whether it succeeded; `sub_call` is
  the S call a delegating turn of M started.
  """
  role: str
  text: str
  tool: str = ""
  tool_ok: bool = True
  sub_call: SubCall | None = None


@dataclasses.dataclass(frozen=True)
class Rollout:
  """M's rollout `index`: its messages, answer, correctness, end, R_M and A_M (None: not
  computed)."""
  index: int
  messages: tuple[Message, ...]
  final: str | None
  correct: bool
  format_ok: bool
  end: str
  reward: float | None = None
  advantage: float | None = None


@dataclasses.dataclass(frozen=True)
class Question:
  """One question (`kind`: its type) and its rollouts."""
  id: str
  text: str
  gold: str
  kind: str
  rollouts: tuple[Rollout, ...]


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1rem;background:#fafafa;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem}
.notes{color:#555;margin:0 0 1rem;padding-left:1.2rem}
.question{background:#fff;border:1px solid #ddd;border-radius:6px;margin:0 0 1.5rem;padding:.8rem}
.question h2{font-size:1.05rem;margin:0 0 .3rem}
.meta{color:#555;font-size:.9rem;margin:.1rem 0}
.rollouts{display:grid;grid-auto-flow:column;grid-auto-columns:minmax(24rem,1fr);gap:.8rem;
overflow-x:auto;margin-top:.6rem;align-items:start}
.rollout{border:1px solid #ccc;border-left-width:6px;border-radius:4px;padding:.5rem;
background:#fff;min-width:0}
.rollout.correct{border-left-color:#2e7d32}
.rollout.incorrect{border-left-color:#c62828}
.rollout h3{font-size:1rem;margin:0 0 .3rem}
.mark{font-weight:bold;padding:0 .3rem;border-radius:3px;color:#fff}
.mark.correct{background:#2e7d32}
.mark.incorrect{background:#c62828}
ol.turns{list-style:none;margin:.4rem 0 0;padding:0}
.turn{margin:.3rem 0;padding:.3rem .4rem;border-radius:3px}
.turn .role{font-size:.75rem;font-weight:bold;text-transform:uppercase;color:#666}
.turn.assistant{background:#eef5ee}
.turn.observation{background:#f4f4f4}
.turn.task{background:#fff8e1}
.tool{font-family:monospace;font-size:.85rem;color:#0d47a1}
.tool.failed{color:#c62828}
pre{white-space:pre-wrap;word-break:break-word;margin:.2rem 0;font-size:.85rem}
.sub-call{margin:.4rem 0 .2rem 1rem;border-left:3px solid #1565c0;background:#f3f7fc;
padding:.3rem .5rem}
.sub-call>summary{cursor:pointer;font-weight:bold;color:#0d47a1}
.final{font-weight:bold}
.advantage{font-family:monospace}
.alignment{color:#6a1b9a}
""".strip()


def _e(text: object) -> str:
  return html.escape(str(text), quote=True)


def _reward(name: str, value: float | None) -> str:
  return "" if value is None else f" &middot; {name} {value:.3f}"


def _advantage(name: str, value: float | None) -> str:
  return "" if value is None else f' &middot; <span class="advantage">{name} {value:+.3f}</span>'


def _alignment(text: str) -> str:
  return "" if not text else f' &middot; <span class="alignment">{_e(text)}</span>'



def _mark(correct: bool) -> str:
  if correct:
    return '<span class="mark correct">&#10003; correct</span>'
  return '<span class="mark incorrect">&#10007; incorrect</span>'


def _final(final: str | None) -> str:
  return "(no result)" if final is None else _e(final)


def _messages(messages: Sequence[Message]) -> str:
  items = []
  for message in messages:
    body = f"<pre>{_e(message.text)}</pre>"
    if message.role == "system":
      items.append(f'<li class="turn system"><details><summary class="role">system prompt'
                   f"</summary>{body}</details></li>")
      continue
    tool = ""
    if message.tool:
      failed = "" if message.tool_ok else " failed"
      tool = f'<div class="tool{failed}">&rarr; {_e(message.tool)}</div>'
    sub = "" if message.sub_call is None else _sub_call(message.sub_call)
    items.append(f'<li class="turn {_e(message.role)}"><div class="role">{_e(message.role)}'
                 f"</div>{body}{tool}{sub}</li>")
  return f'<ol class="turns">{"".join(items)}</ol>'


def _sub_call(call: SubCall) -> str:
  fmt = "" if call.format_ok else " &middot; format error"
  return (f'<details class="sub-call" data-call="{call.index}" open><summary>S call '
          f"{call.index}: {_e(call.subtask)}</summary>"
          f'<div class="meta">S result: <span class="final">{_final(call.final)}</span>'
          f"{fmt}{_reward('R_S', call.reward)}{_advantage('A_S', call.advantage)}"
          f"{_alignment(call.alignment)}</div>{_messages(call.messages)}</details>")


def _rollout(rollout: Rollout) -> str:
  status = "correct" if rollout.correct else "incorrect"
  fmt = "" if rollout.format_ok else " &middot; format error"
  return (f'<article class="rollout {status}" data-rollout="{rollout.index}">'
          f"<h3>rollout {rollout.index} {_mark(rollout.correct)}</h3>"
          f'<div class="meta">answer: <span class="final">{_final(rollout.final)}</span></div>'
          f'<div class="meta">ended: {_e(rollout.end)}{fmt}'
          f"{_reward('R_M', rollout.reward)}{_advantage('A_M', rollout.advantage)}</div>"
          f"{_messages(rollout.messages)}</article>")


def _question(question: Question) -> str:
  right = sum(r.correct for r in question.rollouts)
  return (f'<section class="question" data-query-id="{_e(question.id)}">'
          f"<h2>{_e(question.text)}</h2>"
          f'<div class="meta">gold answer: <span class="final">{_e(question.gold)}</span>'
          f" &middot; type {_e(question.kind)} &middot; id {_e(question.id)} &middot; "
          f"{right} of {len(question.rollouts)} rollouts correct</div>"
          f'<div class="rollouts">{"".join(_rollout(r) for r in question.rollouts)}</div>'
          "</section>")


def render(title: str, questions: Sequence[Question], *, notes: Sequence[str] = ()) -> str:
  """The page of `questions` (module docstring); `notes` are lines under the title."""
  note_items = "".join(f"<li>{_e(n)}</li>" for n in notes)
  return ("<!DOCTYPE html>\n"
          f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
          f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
          f'<ul class="notes">{note_items}</ul>'
          f'{"".join(_question(q) for q in questions)}</body></html>\n')
