"""A self-contained HTML page of multi-agent trajectories: data in, an HTML string out.

  html = render("Held-out evaluation: final", questions, notes=["accuracy 0.79"])

The page opens with a legend, in plain words, of what it shows (correct or incorrect,
R_M, A_M, R_S, A_S and the D slots: docs/ALGORITHM.md sections 2 to 4) and an index of
its questions, each a link to its section. Each `Question` is a section with its text,
its gold answer and how many of its rollouts were correct; its rollouts stand side by
side, one column each, marked correct or incorrect, with R_M (and A_M, its
group-relative advantage, on a training step's page), the final answer and how the
trajectory ended. A rollout lists M's messages in order (the system prompt folded away);
an assistant turn that delegated holds S's call nested under it (the sub-task, S's own
messages with its tool calls and observations, its result, R_S and A_S when given, and
on a training step's page how the call was aligned to the D slots: which slot,
duplicated into several, or dropped), followed by the observation M received.

The page has inline CSS only: no script, no network resource. Every text that comes
from a trajectory or a question is HTML-escaped. The markup carries stable hooks for
tools and tests: `section.question[data-query-id]` (its `id`, the anchor the index links
to, is `question_anchors` of the query id: the same on every page that shows the
question), `article.rollout[data-rollout]` (with class `correct` or `incorrect`),
`details.sub-call[data-call]`, `.reward` and `.advantage` (R and A of a rollout or S
call), `.legend` and `nav.index`.

A page's file name says which kind it is (`rl_step_page_name`, `eval_page_name`): an RL
step's rollouts, with the credit the step gave them, or a held-out evaluation of a
checkpoint.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Sequence

# A held-out evaluation's label that names the checkpoint of an RL step ("step_10").
_STEP_LABEL = re.compile(r"step_(\d+)")


def rl_step_page_name(step: int) -> str:
  """The file name of RL step t's page (its training rollouts and their credit):
  rl_step_00010.html."""
  return f"rl_step_{step:05d}.html"


def eval_page_name(label: str) -> str:
  """The file name of the held-out evaluation `label`'s page: eval_final.html,
  eval_warm_start.html, eval_step_00010.html (label "step_10", that step's checkpoint)."""
  step = _STEP_LABEL.fullmatch(label)
  name = label if step is None else f"step_{int(step.group(1)):05d}"
  return f"eval_{name}.html"


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


# (term, its meaning in plain words): the page's legend (docs/ALGORITHM.md sections 2-4).
LEGEND = (
    ("correct / incorrect",
     "M's final answer judged against the question's gold answer (normalized exact match); "
     "a rollout's coloured edge and mark say which."),
    ("R_M",
     "M's reward for a rollout: 0 when M broke the answer format, else a1 x format + "
     "a2 x correctness (by default 0.1 and 0.9: 1.0 for a correct well-formed answer, 0.1 "
     "for a wrong one)."),
    ("A_M",
     "M's advantage (an RL step's page only): the rollout's R_M measured against the K "
     "rollouts of the same question, (R_M - their mean) / their standard deviation. "
     "Positive: better than its siblings, made more likely by the update; negative: made "
     "less likely; 0 when all K scored alike."),
    ("S call",
     "M delegated a sub-task to the sub-agent S: S's own turns are nested under M's "
     "delegating turn, and its result is the observation M received next."),
    ("R_S",
     "S's reward for one call (an RL step's page only; an evaluation does not judge S): "
     "0 when S broke the report format, else b1 x format + b2 x M's correctness in that "
     "rollout + b3 x the expert score of S's report (by default 0.1, 0.4 and 0.5; the "
     "released code's formula has no expert term)."),
    ("A_S",
     "S's advantage for one call (an RL step's page only): its R_S measured against the "
     "filled slots of the same question across its K rollouts, (R_S - their mean) / their "
     "standard deviation. Not shown for a dropped call, a frozen S, or no_alignment "
     "(whose groups mix questions)."),
    ("slots",
     "S trains on a batch of fixed shape: each rollout's calls are aligned into D slots "
     "(mgrpo.aligned_sub_calls). \"slot j\": the call filled slot j. \"slots i, j "
     "(duplicated)\": the rollout made fewer than D calls, so this one was drawn again to "
     "fill spare slots; it counts once per slot in S's group and loss (with "
     "mgrpo.alignment = mask spare slots stay empty instead). \"dropped\": the rollout "
     "made more than D calls and this one was not among the D kept: S does not learn from "
     "it."),
)

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1rem;background:#fafafa;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem}
.notes{color:#555;margin:0 0 1rem;padding-left:1.2rem}
.legend,.index{background:#fff;border:1px solid #ddd;border-radius:6px;margin:0 0 1rem;
padding:.5rem .8rem}
.legend>summary,.index h2{font-size:1rem;font-weight:bold;margin:0}
.legend>summary{cursor:pointer}
.legend dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem .8rem;margin:.4rem 0 0}
.legend dt{font-weight:bold;font-family:monospace}
.legend dd{margin:0}
.index ol{margin:.3rem 0 0;padding-left:1.6rem}
.index li{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.to-index{font-size:.85rem}
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
  return "" if value is None else f' &middot; <span class="reward">{name} {value:.3f}</span>'


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


def question_anchors(ids: Sequence[str]) -> list[str]:
  """The section ids of questions `ids` on one page: "q-" and the query id with every
  character but letters, digits, "_" and "-" as "_"; "-2", "-3", ... after a repeat."""
  anchors, used = [], set()
  for query_id in ids:
    base = "q-" + re.sub(r"[^A-Za-z0-9_-]", "_", query_id)
    anchor, n = base, 1
    while anchor in used:
      n += 1
      anchor = f"{base}-{n}"
    used.add(anchor)
    anchors.append(anchor)
  return anchors


def _right(question: Question) -> str:
  right = sum(r.correct for r in question.rollouts)
  return f"{right} of {len(question.rollouts)} rollouts correct"


def _question(question: Question, anchor: str) -> str:
  return (f'<section class="question" id="{_e(anchor)}" data-query-id="{_e(question.id)}">'
          f"<h2>{_e(question.text)}</h2>"
          f'<div class="meta">gold answer: <span class="final">{_e(question.gold)}</span>'
          f" &middot; type {_e(question.kind)} &middot; id {_e(question.id)} &middot; "
          f'{_right(question)} &middot; <a class="to-index" href="#index">&uarr; index</a>'
          f'</div><div class="rollouts">{"".join(_rollout(r) for r in question.rollouts)}'
          "</div></section>")


def _legend() -> str:
  """The legend (`LEGEND`), open; a reader may fold it."""
  terms = "".join(f"<dt>{_e(term)}</dt><dd>{_e(meaning)}</dd>" for term, meaning in LEGEND)
  return (f'<details class="legend" id="legend" open><summary>Legend</summary>'
          f"<dl>{terms}</dl></details>")


def _index(questions: Sequence[Question], anchors: Sequence[str]) -> str:
  """The page's questions in order, each a link to its section."""
  items = "".join(f'<li><a href="#{_e(anchor)}">{_e(q.text)}</a> '
                  f'<span class="meta">{_e(q.kind)} &middot; {_right(q)}</span></li>'
                  for q, anchor in zip(questions, anchors, strict=True))
  body = f"<ol>{items}</ol>" if items else '<p class="meta">No questions on this page.</p>'
  return f'<nav class="index" id="index"><h2>Questions</h2>{body}</nav>'


def render(title: str, questions: Sequence[Question], *, notes: Sequence[str] = ()) -> str:
  """The page of `questions` (module docstring); `notes` are lines under the title."""
  note_items = "".join(f"<li>{_e(n)}</li>" for n in notes)
  anchors = question_anchors([q.id for q in questions])
  sections = "".join(_question(q, a) for q, a in zip(questions, anchors, strict=True))
  return ("<!DOCTYPE html>\n"
          f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
          f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
          f'<ul class="notes">{note_items}</ul>{_legend()}{_index(questions, anchors)}'
          f"{sections}</body></html>\n")
