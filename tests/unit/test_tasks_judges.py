"""Answer normalization / matching and the programmatic expert score."""

from __future__ import annotations

import pytest

from mgrpo_jax.tasks import judges, questions, statements, world


@pytest.mark.parametrize("prediction,gold,match", [
  ("1,200", "1200", True), ("1200.0", "1200", True), ("about 1,200 people", "1200", True),
  ("1201", "1200", False), ("12 or 1200", "1200", False), ("The Velora Trust.", "velora trust",
  True), ("  velora   TRUST ", "Velora Trust", True), ("Velora", "Velora Trust", False),
  ("an amber", "amber", True), ("-3", "-3", True), ("3.50", "3.5", True),
  ("", "", False), ("True", "true", True),
])
def test_answers_match(prediction, gold, match):
  assert judges.answers_match(prediction, gold) is match


def test_normalize_answer():
  assert judges.normalize_answer("The  Kalo-Festival, 1,204,330!") == "kalo festival 1204330"
  assert judges.normalize_answer(None) == ""
  assert judges.parse_number("1,200") == 1200.0 and judges.parse_number("x") is None


@pytest.fixture(scope="module")
def setup():
  w = world.generate_world("tiny", 2)
  q = next(q for q in questions.synthesize(w, 200, stage=2, seed=0) if q.hops >= 3
           and q.meta["op"] == "chain")
  return w, q, judges.ProgrammaticExpertJudge(w)


def test_expert_on_path_off_path_false(setup):
  w, q, judge = setup
  on = q.path[0]
  report_on = statements.fact_sentence(on.relation, on.subject, [on.object])
  assert judge(q, "", report_on) == 1.0
  entity = w.name_to_id[on.subject]
  off = next(f for f in w.facts_of(entity) if f not in q.path)
  report_off = statements.fact_sentence(off.relation, off.subject, [off.object])
  assert judge(q, "", report_off) == 0.5
  wrong_value = "1" if off.object != "1" else "2"
  report_false = statements.fact_sentence(off.relation, off.subject, [wrong_value])
  assert judge(q, "", report_false) == 0.0
  # Mean over claims: (1 + 0.5 + 0) / 3.
  assert judge(q, "", " ".join([report_on, report_off, report_false])) == pytest.approx(0.5)
  assert judge(q, "", statements.NO_FACTS) == 0.0
  assert judge(q, "", "The founder of Nobody Real is X.") == 0.0


def test_expert_normalizes_numbers_and_lists(setup):
  w, q, judge = setup
  city = int(w.ids_by_type["city"][0])
  pop = w.attribute(city, "population")
  report = statements.fact_sentence("population", w.names[city], [f"{int(pop):,}"])
  assert judge(q, "", report) == 0.5
  river = int(w.ids_by_type["river"][0])
  cities = w.values(river, "flows_through")
  report = statements.fact_sentence("flows_through", w.names[river], cities)
  assert statements.parse_facts(report)[-1].object == cities[-1]
  assert judge(q, "", report) == 0.5


def test_statements_roundtrip():
  text = statements.subtask_text("founded_by", "Velora Trust")
  assert text == "Find the founder of Velora Trust."
  assert statements.parse_subtask(text) == ("founded_by", "Velora Trust")
  assert statements.parse_subtask("Research this: what?") is None
  facts = statements.parse_facts("The birth year of Kamo Bereti is 1854. The year of Kalo "
                                 "Fair is 1,900.")
  assert facts == [statements.Statement("birth_year", "Kamo Bereti", "1854"),
                   statements.Statement("event_year", "Kalo Fair", "1,900")]
