"""Judges that ask a language model: r_correct of M's answers and r_expert of S's reports.

For each item a prompt file (`judge_prompts/`, or a file of the user's) is filled with
the item's fields, the model replies (`JudgeModel.complete`, in batches of
`JudgeModel.batch_size` prompts), and the reply's verdict, read by one of the strict
grammars of `verdicts.py`, gives the score. Each grammar has its own prompts and labels
(`default_prompt`, `verdicts`): `final_line` (`answer.txt`, `expert.txt`: a final
`VERDICT:` line) and `first_word` (`answer_first_word.txt`, `expert_first_word.txt`: the
label first, for small models). A prompt file may end with a line `[reply]` and the
text the judge's reply starts with (the model's turn is primed with it, e.g. `Verdict:`,
so that a small model's next word is the label); the grammar reads what the model writes
after it.

  answer judge  fields question, gold_answer, candidate; verdicts correct (1.0) and
                incorrect (0.0): the paper's r_correct in R_M = format * (a1 + a2 *
                correct), without the gold-answer string match.
  expert judge  fields question, subtask, report, evidence (S's tool observations, cut to
                `evidence_chars`, or left out); verdicts 1, 0.5 and 0 (`final_line`) or
                yes, partly and no (`first_word`): the paper's r_expert in R_S (1: true
                and what the sub-task asks for, 0.5: true but off the question's path or
                partial, 0: false or unsupported), without the gold path.

A reply without exactly one well-formed verdict is a judge failure: counted
(`JudgeCounters.failures`) and scored `failure_score`, a setting of the caller
(`rewards.judge.failure_score`), never a silent 0 or 1. Every reply is cached on disk
(`judge_cache.py`) under the hash of (the model's identity, the prompt file's contents,
the sampling settings, the verdict grammar, the item's fields): items already asked, in
this run or an earlier one, and duplicates within a batch, are not asked again.
"""

from __future__ import annotations

import dataclasses
import pathlib
import string
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mgrpo_jax.tasks.judge_cache import JudgeCache, cache_key
from mgrpo_jax.tasks.judges import AnswerItem, ReportItem
from mgrpo_jax.tasks.verdicts import FINAL_LINE, FIRST_WORD, PARSERS, VerdictError

PROMPTS = pathlib.Path(__file__).parent / "judge_prompts"
ANSWER_FIELDS = ("question", "gold_answer", "candidate")
EXPERT_FIELDS = ("question", "subtask", "report", "evidence")
ANSWER_VERDICTS = {"correct": 1.0, "incorrect": 0.0}
EXPERT_VERDICTS = {"1": 1.0, "0.5": 0.5, "0": 0.0}
# The expert labels of `first_word`: words, as a number first is often a list's "1.".
EXPERT_WORD_VERDICTS = {"yes": 1.0, "partly": 0.5, "no": 0.0}
# What the expert prompt's {evidence} reads when S read nothing, when evidence is left
# out (evidence_chars 0), and after evidence cut to evidence_chars.
NO_EVIDENCE = "(nothing)"
EVIDENCE_OFF = "(not shown)"
EVIDENCE_CUT = " [...]"


def verdicts(kind: str, verdict_format: str) -> dict[str, float]:
  """The labels and scores of the `kind` ("answer", "expert") judge in `verdict_format`."""
  if kind == "answer":
    return dict(ANSWER_VERDICTS)
  return dict(EXPERT_WORD_VERDICTS if verdict_format == FIRST_WORD else EXPERT_VERDICTS)


def default_prompt(kind: str, verdict_format: str) -> pathlib.Path:
  """The package's prompt file of the `kind` judge in `verdict_format`."""
  return PROMPTS / (f"{kind}.txt" if verdict_format == FINAL_LINE
                    else f"{kind}_{verdict_format}.txt")


class JudgeModel(Protocol):
  """A model that completes judge prompts (e.g. `training.judge_model.SamplerJudgeModel`).

  `identity` names the model (weights, tokenizer, chat template) and `settings` its
  sampling (JSON values): both enter the cache key, so another model or another
  temperature never reads this one's replies.
  """

  identity: Mapping[str, Any]
  settings: Mapping[str, Any]
  batch_size: int

  def complete(self, prompts: Sequence[str], reply_prefix: str = "") -> list[str]:
    """The reply to each prompt (a user message), in order; at most `batch_size`. The
    model's turn starts with `reply_prefix`, which the replies do not repeat."""
    ...


# The line of a prompt file after which the start of the judge's reply follows.
REPLY_MARKER = "[reply]"


@dataclasses.dataclass(frozen=True)
class JudgePrompt:
  """A prompt file with named placeholders (`{question}`; `{{` for a literal brace): the
  user message, then optionally a line `[reply]` and the start of the judge's reply
  (`reply_prefix`, no placeholders; module docstring)."""

  path: pathlib.Path
  text: str
  message: str
  reply_prefix: str

  @classmethod
  def load(cls, path: str | pathlib.Path, fields: Sequence[str]) -> JudgePrompt:
    """The file at `path`, whose placeholders must be exactly `fields`.

    Raises:
      ValueError: naming the file and the missing or unknown placeholder.
    """
    path = pathlib.Path(path)
    try:
      text = path.read_text(encoding="utf-8")
    except OSError as e:
      raise ValueError(f"judge prompt {path}: {e}") from None
    lines = text.splitlines(keepends=True)
    markers = [i for i, line in enumerate(lines) if line.strip() == REPLY_MARKER]
    if len(markers) > 1:
      raise ValueError(f"judge prompt {path}: lines {', '.join(str(i + 1) for i in markers)} "
                       f"are {REPLY_MARKER}, expected at most one")
    cut = markers[0] if markers else len(lines)
    message, reply = "".join(lines[:cut]), "".join(lines[cut + 1:]).rstrip("\n")
    try:
      found, in_reply = ({name for _, name, _, _ in string.Formatter().parse(part)
                          if name is not None} for part in (message, reply))
    except ValueError as e:
      raise ValueError(f"judge prompt {path}: {e} (write a literal brace as {{{{ or }}}})"
                       ) from None
    if in_reply:
      raise ValueError(f"judge prompt {path}: the reply's start after line {cut + 1} "
                       f"({REPLY_MARKER}) may not hold a placeholder, found "
                       f"{', '.join(sorted(in_reply))}")
    unknown, missing = sorted(found - set(fields)), sorted(set(fields) - found)
    if unknown or missing:
      raise ValueError(f"judge prompt {path}: placeholders must be {{"
                       + "}, {".join(fields) + "}"
                       + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                       + (f"; missing: {', '.join(missing)}" if missing else ""))
    return cls(path, text, message, reply.format())

  def fill(self, values: Mapping[str, str]) -> str:
    """The user message of `values`."""
    return self.message.format(**values)

  def transcript(self, values: Mapping[str, str]) -> str:
    """The user message of `values` and the reply's start, as the file writes them: what
    the cache keeps beside a reply."""
    if not self.reply_prefix:
      return self.fill(values)
    return f"{self.fill(values)}{REPLY_MARKER}\n{self.reply_prefix}"


@dataclasses.dataclass
class JudgeCounters:
  """What a model judge did so far (a run logs them: `scalars`).

  Attributes:
    items: items judged, cache hits included.
    cached: items whose reply came from the cache.
    generated: replies the model generated (each at most once per distinct prompt).
    verdicts: items with a well-formed verdict.
    failures: items without one, scored the failure score.
  """

  items: int = 0
  cached: int = 0
  generated: int = 0
  verdicts: int = 0
  failures: int = 0

  def scalars(self, prefix: str) -> dict[str, float]:
    """{`prefix`/name: value} of every counter, and the failure rate."""
    out = {f"{prefix}/{f.name}": float(getattr(self, f.name))
           for f in dataclasses.fields(self)}
    out[f"{prefix}/failure_rate"] = self.failures / max(self.items, 1)
    return out


@dataclasses.dataclass(frozen=True)
class Judgement:
  """One item's outcome: its verdict label, or None for a judge failure (`problem` says
  why); the score it gets; the model's reply; whether that came from the cache."""

  verdict: str | None
  problem: str
  score: float
  reply: str
  cached: bool


class ModelJudge:
  """A prompt, a model, a cache and a verdict grammar: the shared part of the model's
  answer and expert judges (module docstring)."""

  def __init__(self, model: JudgeModel, prompt: JudgePrompt, cache: JudgeCache,
               verdicts: Mapping[str, float], *, verdict_format: str, failure_score: float):
    if not 0.0 <= failure_score <= 1.0:
      raise ValueError(f"failure_score must be in [0, 1], got {failure_score}")
    if verdict_format not in PARSERS:
      raise ValueError(f"verdict_format must be one of {', '.join(PARSERS)}, got "
                       f"{verdict_format!r}")
    self.model = model
    self.prompt = prompt
    self.cache = cache
    self.verdicts = dict(verdicts)
    self.verdict_format = verdict_format
    self.failure_score = float(failure_score)
    self.counters = JudgeCounters()

  def key(self, fields: Mapping[str, str]) -> str:
    """The cache key of one item's `fields`."""
    return cache_key({"model": dict(self.model.identity), "settings": dict(self.model.settings),
                      "prompt": self.prompt.text, "verdict_format": self.verdict_format,
                      "fields": dict(fields)})

  def judge_fields(self, items: Sequence[Mapping[str, str]]) -> list[Judgement]:
    """One `Judgement` per item (its prompt's fields), in order; uncached prompts go to
    the model in batches, shortest first, each batch's replies cached as it ends."""
    keys = [self.key(fields) for fields in items]
    replies = {key: self.cache.get(key) for key in dict.fromkeys(keys)}
    cached = {key for key, reply in replies.items() if reply is not None}
    fields_of = dict(zip(keys, items, strict=True))
    pending = {key: self.prompt.fill(fields) for key, fields in fields_of.items()
               if key not in cached}
    order = sorted(pending, key=lambda k: (len(pending[k]), k))
    size = max(1, int(self.model.batch_size))
    for start in range(0, len(order), size):
      chunk = order[start:start + size]
      outputs = self.model.complete([pending[key] for key in chunk],
                                    reply_prefix=self.prompt.reply_prefix)
      if len(outputs) != len(chunk):
        raise ValueError(f"the judge model returned {len(outputs)} replies for "
                         f"{len(chunk)} prompts")
      for key, output in zip(chunk, outputs, strict=True):
        self.cache.put(key, self.prompt.transcript(fields_of[key]), output)
        replies[key] = output
      self.counters.generated += len(chunk)
    return [self._outcome(replies[key], key in cached) for key in keys]

  def _outcome(self, reply: str, cached: bool) -> Judgement:
    counters = self.counters
    counters.items += 1
    counters.cached += cached
    try:
      label = PARSERS[self.verdict_format](reply, self.verdicts)
    except VerdictError as e:
      counters.failures += 1
      return Judgement(None, str(e), self.failure_score, reply, cached)
    counters.verdicts += 1
    return Judgement(label, "", self.verdicts[label], reply, cached)


class ModelAnswerJudge:
  """`judges.AnswerJudge` asking a model whether a candidate answer matches the gold one."""

  def __init__(self, judge: ModelJudge):
    self.judge = judge

  @property
  def counters(self) -> JudgeCounters:
    return self.judge.counters

  def judgements(self, items: Sequence[AnswerItem]) -> list[Judgement]:
    return self.judge.judge_fields([
        {"question": item.task.text, "gold_answer": item.task.answer,
         "candidate": item.prediction} for item in items])

  def batch(self, items: Sequence[AnswerItem]) -> list[float]:
    return [j.score for j in self.judgements(items)]

  def __call__(self, task, prediction: str) -> float:
    return self.batch([AnswerItem(task, prediction)])[0]


class ModelExpertJudge:
  """`judges.ExpertJudge` asking a model to grade a report, with the evidence S read: its
  first `evidence_chars` characters (marked `EVIDENCE_CUT` when cut), or, at 0, none
  (`EVIDENCE_OFF`: the prompt is shorter and the judge is not told S read nothing)."""

  def __init__(self, judge: ModelJudge, *, evidence_chars: int):
    if evidence_chars < 0:
      raise ValueError(f"evidence_chars must be >= 0, got {evidence_chars}")
    self.judge = judge
    self.evidence_chars = int(evidence_chars)

  @property
  def counters(self) -> JudgeCounters:
    return self.judge.counters

  def evidence(self, text: str) -> str:
    """What the prompt's {evidence} reads for the evidence `text` S read."""
    if not self.evidence_chars:
      return EVIDENCE_OFF
    if not text:
      return NO_EVIDENCE
    return (text if len(text) <= self.evidence_chars
            else text[:self.evidence_chars] + EVIDENCE_CUT)

  def judgements(self, items: Sequence[ReportItem]) -> list[Judgement]:
    return self.judge.judge_fields([
        {"question": item.task.text, "subtask": item.subtask, "report": item.report,
         "evidence": self.evidence(item.evidence)} for item in items])

  def batch(self, items: Sequence[ReportItem]) -> list[float]:
    return [j.score for j in self.judgements(items)]

  def __call__(self, task, subtask: str, report: str) -> float:
    return self.batch([ReportItem(task, subtask, report)])[0]
