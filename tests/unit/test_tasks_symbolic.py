"""The symbolic world: one token per symbol, a shared name pool, compact pages, oracles
whose mistakes are systematic and tied to the agent that can fix them, and its judge."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.tasks import datasets
from mgrpo_jax.tasks.oracle import run_episode
from mgrpo_jax.tasks.renderings import get_rendering
from mgrpo_jax.tasks.symbolic import language, vocabulary
from mgrpo_jax.tasks.symbolic.judge import SymbolicExpertJudge
from mgrpo_jax.tasks.symbolic.world import generate_world, render_pages
from mgrpo_jax.tasks.world import Fact
from mgrpo_jax.text import DEFAULT_USER_DEFINED_SYMBOLS, SentencePieceTokenizer
from mgrpo_jax.tools import SearchIndex, default_registry
from mgrpo_jax.training.tokenizer_corpus import episode_text, protocol_symbols
from tests.support.oracle_episodes import accuracy_by_type

SYMBOLIC = get_rendering("symbolic")


@pytest.fixture(scope="module")
def worlds():
  return SYMBOLIC.split_worlds("tiny", 0, 1)


@pytest.fixture(scope="module")
def test_env(worlds):
  test = worlds[1]
  registry = default_registry(SearchIndex.from_pages(render_pages(test)), visit_budget=1500)
  qs = SYMBOLIC.synthesize(test, 400, stage=1, seed=3, id_prefix="t")
  return test, registry, qs


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, worlds, test_env):
  """A world tokenizer as `agent_setup.world_tokenizer` trains it (pages, questions,
  transcripts; the protocol's and the rendering's symbols as user-defined symbols)."""
  train = worlds[0]
  _, registry, qs = test_env
  main, sub = SYMBOLIC.main_oracle(0.7, 0), SYMBOLIC.sub_oracle(0.7, 0)
  corpus = [p.text for p in render_pages(train)] + [q.text for q in qs]
  corpus += [episode_text(run_episode(q.text, main, sub, registry)) for q in qs[:100]]
  return SentencePieceTokenizer.train(
      corpus, tmp_path_factory.mktemp("tok"), 980,
      user_defined_symbols=DEFAULT_USER_DEFINED_SYMBOLS + protocol_symbols("short")
      + SYMBOLIC.symbols)


def test_worlds_share_the_name_pool_and_differ_in_their_graphs(worlds):
  train, test = worlds
  assert set(train.names) <= set(vocabulary.NAME_POOL)
  assert set(test.names) <= set(vocabulary.NAME_POOL)
  shared = set(train.names) & set(test.names)
  assert len(shared) > 0.3 * len(train)  # one pool: the test world reuses trained symbols
  differing = sum(train.value(train.name_to_id[n], "boss") != test.value(test.name_to_id[n],
                                                                       "boss") for n in shared)
  assert differing > 0.9 * len(shared)  # ...with facts of its own
  again = generate_world("tiny", 1)
  assert again.names == test.names and (again.years == test.years).all()


def test_pages_are_compact_and_state_every_fact(worlds):
  train = worlds[0]
  for page in render_pages(train):
    facts = dict(language.forward_facts(page.text))
    assert facts == {p: train.value(page.page_id, p) for p in vocabulary.PROPERTIES}
    assert page.text.splitlines()[0] == page.title == train.names[page.page_id]
    assert len(page.text.splitlines()) <= 1 + len(vocabulary.PROPERTIES) + 2 + 1


def test_every_word_of_pages_questions_and_transcripts_is_one_token(tokenizer, worlds,
                                                                    test_env):
  """Each name, property, value and page id is a single token wherever it occurs."""
  _, registry, qs = test_env
  symbols = set(vocabulary.symbols())
  texts = [p.text for w in worlds for p in render_pages(w)]
  texts += [q.text + " " + q.answer for q in qs]
  main, sub = SYMBOLIC.main_oracle(0.7, 0), SYMBOLIC.sub_oracle(0.7, 0)
  texts += [episode_text(run_episode(q.text, main, sub, registry)) for q in qs[:50]]
  checked = 0
  for text in texts:
    for word in text.replace('"', " ").split():
      word = word.strip("{}:,")
      if word in symbols:
        ids = tokenizer.encode(word)
        assert len(ids) == 1, (word, [tokenizer.id_to_token(i) for i in ids])
        checked += 1
  assert checked > 5000
  # A property before its value is one token with its space: [boss ][E044].
  pieces = [tokenizer.id_to_token(i) for i in tokenizer.encode("boss E044\nyear 1954")]
  assert pieces == ["boss\u2581", "E044", "\n", "year\u2581", "1954"]
  for page_id in range(len(worlds[0])):
    assert len(tokenizer.encode(str(page_id))) == 1, page_id


def test_the_clean_oracles_solve_every_question_through_the_tools(test_env):
  _, registry, qs = test_env
  assert set(q.type for q in qs) == {"lookup", "two_hop", "three_hop", "difference",
                                     "puzzle"}
  clean = accuracy_by_type(qs, SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.0, 0), registry)
  assert clean == {t: 1.0 for t in clean}


def test_each_mistake_hits_only_the_questions_its_agent_owns(test_env):
  """Always-on mistakes (rate 1, what a greedy policy imitates): M's fail every puzzle,
  every difference (the subtraction sent to S) and every three-hop chain, S's the
  look-ups of its two relations."""
  _, registry, qs = test_env
  clean_main, clean_sub = SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.0, 0)
  main_only = accuracy_by_type(qs, SYMBOLIC.main_oracle(1.0, 0), clean_sub, registry)
  assert main_only["puzzle"] == main_only["difference"] == 0.0
  assert main_only["three_hop"] < 0.1  # only chains that repeat a relation survive
  assert main_only["lookup"] == main_only["two_hop"] == 1.0
  sub_only = accuracy_by_type(qs, clean_main, SYMBOLIC.sub_oracle(1.0, 0), registry)
  assert sub_only["puzzle"] == sub_only["difference"] == 1.0
  targeted = [q for q in qs if q.type == "lookup" and q.text.split()[1] in ("boss", "maker")]
  # Only pages whose neighbouring line holds the same object survive the mistake.
  assert targeted and accuracy_by_type(targeted, clean_main, SYMBOLIC.sub_oracle(1.0, 0),
                                registry)["lookup"] < 0.1
  assert 0.2 < sub_only["lookup"] < 0.9
  both = accuracy_by_type(qs, SYMBOLIC.main_oracle(1.0, 0), SYMBOLIC.sub_oracle(1.0, 0), registry)
  total = sum(both[q.type] for q in qs) / len(qs)
  assert 0.3 <= total <= 0.6  # the warm start's target


def test_a_per_mistake_rate_moves_that_mistake_alone(test_env):
  """`rates` overrides `rate` by name: with M's mistakes always on but `wrong_relation`
  off, puzzles still fail and three-hop chains are solved; the other way round, the
  reverse. The decision is keyed by mistake and text, so an override changes no other
  mistake's cases."""
  _, registry, qs = test_env
  clean_sub = SYMBOLIC.sub_oracle(0.0, 0)
  relation_off = accuracy_by_type(
      qs, SYMBOLIC.main_oracle(1.0, 0, (("wrong_relation", 0.0),)), clean_sub, registry)
  assert relation_off["three_hop"] == 1.0 and relation_off["puzzle"] == 0.0
  only_relation = accuracy_by_type(
      qs, SYMBOLIC.main_oracle(0.0, 0, (("wrong_relation", 1.0),)), clean_sub, registry)
  assert only_relation["puzzle"] == 1.0 and only_relation["three_hop"] < 0.1
  neighbour_off = accuracy_by_type(
      qs, SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(1.0, 0, (("neighbour_value", 0.0),)),
      registry)
  assert neighbour_off == {t: 1.0 for t in neighbour_off}


def test_the_expert_judge_scores_claims_against_the_world_and_the_path(worlds):
  train = worlds[0]
  judge = SymbolicExpertJudge(train)
  entity = train.names[5]
  boss, home = train.value(5, "boss"), train.value(5, "home")

  class Task:
    path = (Fact(entity, "boss", boss),)

  subtask = language.subtask_text(entity, "boss")
  assert judge(Task, subtask, f"boss {boss}") == 1.0
  assert judge(Task, subtask, f"home {home}") == 0.5
  assert judge(Task, subtask, f"boss {home}") == (1.0 if home == boss else 0.0)
  assert judge(Task, subtask, "none") == 0.0
  assert judge(Task, "37 + 45", f"boss {boss}") == 0.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_the_parsers_never_raise(text):
  language.parse_question(text)
  language.parse_subtask(text)
  language.parse_report(text)
  language.forward_facts(text)


def test_questions_round_trip_through_the_parser(test_env):
  _, _, qs = test_env
  for q in qs:
    plan = language.parse_question(q.text)
    assert plan is not None, q.text
    if q.type == "puzzle":
      assert isinstance(plan, language.Puzzle)
    elif q.type == "difference":
      assert isinstance(plan, language.Difference)
    elif q.type == "list":
      assert isinstance(plan, language.ListQuestion)
    else:
      assert len(plan.props) == q.hops


def test_the_symbolic_build_is_a_world_spec_choice():
  spec = datasets.WorldSpec("tiny", 0, 1, num_train=5, num_validation=2, num_test=3,
                            render="symbolic")
  test = datasets.split_questions(spec, "test")
  assert len(test) == 6 and all(language.parse_question(q.text) for _, q in test)
  with pytest.raises(ValueError, match="world.size 'large' has no symbolic rendering"):
    generate_world("large", 0)
  with pytest.raises(ValueError, match="world.render must be one of"):
    get_rendering("klingon")


def test_list_questions_delegate_once_per_entity_and_are_solved_by_the_clean_oracles(worlds):
  """Stage 2's lists ask one property of 2-6 entities: the clean oracles answer every one
  with the values in order, one S call per entity, so the number of S calls per rollout
  spans 2..6 (what makes alignment drop and duplicate)."""
  test = worlds[1]
  registry = default_registry(SearchIndex.from_pages(render_pages(test)), visit_budget=1500)
  qs = [q for q in SYMBOLIC.synthesize(test, 300, stage=2, seed=5, id_prefix="l")
        if q.type == "list"]
  assert len(qs) > 30
  sizes = set()
  for q in qs:
    plan = language.parse_question(q.text)
    assert isinstance(plan, language.ListQuestion) and q.hops == len(plan.entities)
    assert q.answer == " ".join(test.value(test.names.index(e), plan.prop)
                                for e in plan.entities)
    sizes.add(len(plan.entities))
    episode = run_episode(q.text, SYMBOLIC.main_oracle(0.0, 0), SYMBOLIC.sub_oracle(0.0, 0),
                          registry)
    assert episode.answer == q.answer and len(episode.sub_calls) == len(plan.entities)
  assert sizes == set(range(language.MIN_LIST, language.MAX_LIST + 1))
  assert language.parse_question("E017 boss") == language.Chain("E017", ("boss",))
  assert language.parse_question("E017 E044 E101 boss") == language.ListQuestion(
      ("E017", "E044", "E101"), "boss")
  assert language.parse_question(" ".join(["E017"] * 7 + ["boss"])) is None
