"""The trajectory page: one block per rollout, S's calls nested under M's delegations,
every trajectory text escaped, correct and incorrect rollouts marked, a legend of its
terms, an index whose every link reaches its question's section, and file names that
tell an RL step's page from a held-out evaluation's."""

from __future__ import annotations

import dataclasses
import html.parser

from mgrpo_jax.metrics import trajectory_page
from tests.support import trajectory_pages

VOID = {"meta", "br", "hr", "img", "input", "link"}


class _Tree(html.parser.HTMLParser):
  """Every element as (tag, attributes, ancestors' (tag, attributes)), all text, and
  each piece of text with the elements it is in (`runs`)."""

  def __init__(self):
    super().__init__()
    self.stack: list[tuple[str, dict[str, str]]] = []
    self.elements: list[tuple[str, dict[str, str], tuple]] = []
    self.text: list[str] = []
    self.runs: list[tuple[str, tuple]] = []

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
    self.runs.append((data, tuple(self.stack)))


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


def _text_in(tree, tag, within):
  """The texts of each `tag` element inside an element of class `within`, in order."""
  return [data for data, ancestors in tree.runs
          if ancestors and ancestors[-1][0] == tag
          and any(within in _classes(a) for _, a in ancestors)]


def _links(tree):
  """The href of every link on the page, and every id."""
  ids = [a["id"] for _, a, _ in tree.elements if "id" in a]
  hrefs = [a["href"] for t, a, _ in tree.elements if t == "a" and "href" in a]
  return hrefs, ids


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


def test_every_page_opens_with_a_legend_of_its_terms():
  for questions in (trajectory_pages.questions(), []):
    tree = _parse(trajectory_page.render("eval", questions))
    (legend,) = _of_class(tree, "legend")
    position = tree.elements.index(legend)
    assert all(tree.elements.index(e) > position for e in _of_class(tree, "question"))
    terms = _text_in(tree, "dt", "legend")
    assert terms == ["correct / incorrect", "R_M", "A_M", "S call", "R_S", "A_S", "slots"]
    meaning = dict(zip(terms, _text_in(tree, "dd", "legend"), strict=True))
    assert "a1 x format + a2 x correctness" in meaning["R_M"]
    assert "rollouts of the same question" in meaning["A_M"]
    assert "b3 x the expert score" in meaning["R_S"]
    assert "filled slots of the same question" in meaning["A_S"]
    assert "dropped call" in meaning["A_S"]
    for words in ("D slots", "(duplicated)", "fewer than D calls", '"dropped"',
                  "more than D calls"):
      assert words in meaning["slots"], words


def test_the_index_links_each_question_to_its_section_in_order():
  tree = _parse(trajectory_page.render("eval", trajectory_pages.questions()))
  hrefs, ids = _links(tree)
  assert len(ids) == len(set(ids))
  assert all(href.startswith("#") and href[1:] in ids for href in hrefs), (hrefs, ids)
  sections = [a["id"] for t, a, _ in _of_class(tree, "question") if t == "section"]
  index = [a["href"] for t, a, anc in tree.elements
           if t == "a" and any("index" in _classes(x) for _, x in anc)]
  assert index == [f"#{anchor}" for anchor in sections] == ["#q-q0", "#q-q1"]
  assert _text_in(tree, "a", "index") == ["When was Ada born?", "Who <b>wrote</b> it?"]
  assert hrefs.count("#index") == len(sections)  # each section links back
  assert [a for t, a, _ in tree.elements if t == "nav"][0]["id"] == "index"


def test_anchors_are_unique_and_depend_on_the_query_id_only():
  ids = ["q0", "a b", "a_b", "a b", '"><script>', ""]
  assert trajectory_page.question_anchors(ids) == [
      "q-q0", "q-a_b", "q-a_b-2", "q-a_b-3", "q-___script_", "q-"]
  assert trajectory_page.question_anchors(["q0"]) == trajectory_page.question_anchors(ids)[:1]
  first = trajectory_pages.questions()[0]
  questions = [dataclasses.replace(first, id=query_id) for query_id in ids]
  tree = _parse(trajectory_page.render("eval", questions))
  hrefs, anchors = _links(tree)
  assert len(anchors) == len(set(anchors)) == len(ids) + 2  # the legend and the index
  assert all(href[1:] in anchors for href in hrefs)
  assert [a["data-query-id"] for _, a, _ in _of_class(tree, "question")] == ids


def test_an_empty_page_says_it_has_no_questions():
  tree = _parse(trajectory_page.render("eval", []))
  assert "No questions on this page." in _text_in(tree, "p", "index")


def test_page_names_tell_an_rl_step_from_an_evaluation_and_sort_by_step():
  steps = [0, 5, 10, 80, 100, 12345]
  rl = [trajectory_page.rl_step_page_name(t) for t in steps]
  evaluation = [trajectory_page.eval_page_name(f"step_{t}") for t in steps]
  assert rl[2] == "rl_step_00010.html" and evaluation[2] == "eval_step_00010.html"
  assert sorted(rl) == rl and sorted(evaluation) == evaluation
  assert trajectory_page.eval_page_name("final") == "eval_final.html"
  assert trajectory_page.eval_page_name("warm_start") == "eval_warm_start.html"
  assert not {n.split("_")[0] for n in rl} & {n.split("_")[0] for n in evaluation}
