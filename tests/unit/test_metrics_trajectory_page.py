"""The trajectory page: one block per rollout, S's calls nested under M's delegations,
every trajectory text escaped, correct and incorrect rollouts marked."""

from __future__ import annotations

import html.parser

from mgrpo_jax.metrics import trajectory_page
from tests.support import trajectory_pages

VOID = {"meta", "br", "hr", "img", "input", "link"}


class _Tree(html.parser.HTMLParser):
  """Every element as (tag, attributes, ancestors' (tag, attributes)), and all text."""

  def __init__(self):
    super().__init__()
    self.stack: list[tuple[str, dict[str, str]]] = []
    self.elements: list[tuple[str, dict[str, str], tuple]] = []
    self.text: list[str] = []

  def handle_starttag(self, tag, attrs):
    attributes = {k: v or "" for k, v in attrs}
    self.elements.append((tag, attributes, tuple(self.stack)))
    if tag not in VOID:
      self.stack.append((tag, attributes))

  def handle_endtag(self, tag):
    assert self.stack and self.stack[-1][0] == tag, (tag, self.stack[-1:])
    self.stack.pop()

  def handle_data(self, data):
    self.text.append(data)


def _parse(page: str) -> _Tree:
  tree = _Tree()
  tree.feed(page)
  tree.close()
  assert not tree.stack, "unclosed elements"
  return tree


def _classes(attributes) -> set[str]:
  return set(attributes.get("class", "").split())


def _of_class(tree, name):
  return [e for e in tree.elements if name in _classes(e[1])]


def test_one_block_per_rollout_in_each_question():
  tree = _parse(trajectory_page.render("eval", trajectory_pages.questions()))
  rollouts = [e for e in _of_class(tree, "rollout") if e[0] == "article"]
  assert len(rollouts) == 5
  owners = [next(a["data-query-id"] for t, a in ancestors if "question" in _classes(a))
            for _, _, ancestors in rollouts]
  assert owners == ["q0", "q0", "q0", "q1", "q1"]
  assert [a["data-rollout"] for _, a, _ in rollouts] == ["0", "1", "2", "0", "1"]


def test_sub_calls_nest_under_the_delegating_turn_of_their_rollout():
  tree = _parse(trajectory_page.render("eval", trajectory_pages.questions()))
  calls = _of_class(tree, "sub-call")
  assert len(calls) == 1 + 2 + 0 + 1 + 1
  for _, _, ancestors in calls:
    classes = [_classes(a) for _, a in ancestors]
    assert any("rollout" in c for c in classes)
    assert {"turn", "assistant"} <= classes[-1]  # inside the delegating turn
  rollouts = [a for _, a, _ in _of_class(tree, "rollout")]
  per_rollout = [sum(any(a is rollout for _, a in anc) for _, _, anc in calls)
                 for rollout in rollouts]
  assert per_rollout == [1, 2, 0, 1, 1]
  # S's own tool call and observation are inside its call.
  inner = [e for e in tree.elements
           if any("sub-call" in _classes(a) for _, a in e[2]) and "tool" in _classes(e[1])]
  assert len(inner) == 5


def test_trajectory_text_is_escaped_and_shown_verbatim():
  page = trajectory_page.render("<eval>", trajectory_pages.questions(),
                                notes=["<script>x()</script>"])
  assert "<script" not in page and "<b>" not in page
  assert "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;" in page
  tree = _parse(page)
  assert not [e for e in tree.elements if e[0] in ("script", "b", "link", "img", "iframe")]
  assert trajectory_pages.HOSTILE in "".join(tree.text)  # the text reads as written
  assert "Who <b>wrote</b> it?" in "".join(tree.text)


def test_correct_and_incorrect_rollouts_are_marked():
  tree = _parse(trajectory_page.render("eval", trajectory_pages.questions()))
  status = [("correct" in _classes(a), "incorrect" in _classes(a))
            for t, a, _ in _of_class(tree, "rollout") if t == "article"]
  assert status == [(True, False), (True, False), (False, True), (False, True),
                    (True, False)]
  marks = [a["class"] for t, a, _ in _of_class(tree, "mark")]
  assert marks == ["mark correct", "mark correct", "mark incorrect", "mark incorrect",
                   "mark correct"]
  text = "".join(tree.text)
  assert "2 of 3 rollouts correct" in text and "1 of 2 rollouts correct" in text
  assert "R_M 1.000" in text and "R_M 0.100" in text and "R_S 0.500" in text


def test_an_empty_page_is_still_a_page():
  tree = _parse(trajectory_page.render("eval", []))
  assert not _of_class(tree, "rollout")
  assert [e[0] for e in tree.elements][:3] == ["html", "head", "meta"]
