"""The trajectory page in a real browser (Debian's headless Chromium).

A held-out evaluation of the scripted oracles on the demo's test world writes its page
through the evaluation stage's writer; Chromium loads it from disk: its DOM has one
rollout element per shown rollout and a screenshot is not blank. The same rollouts,
taken as a training step's, give the step page (`slices.step_pages`): every S call
shown carries its D-slot alignment, every rollout its A_M. Hostile text from a
trajectory stays text in the browser's DOM. Skipped without `chromium`, except where
MGRPO_JAX_REQUIRE_WEIGHTS=1 (CI sets it and installs the package): there it fails.
"""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess

import pytest

from configs.local_demo import get_config
from mgrpo_jax.agents import Agent, OraclePolicy
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.evaluation import held_out, stage
from mgrpo_jax.metrics import trajectory_page
from mgrpo_jax.slices import step_math, step_pages
from mgrpo_jax.tasks.world_data import ensure_world, load_questions
from mgrpo_jax.tasks.world_setup import WorldSetup
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from tests.support import trajectory_pages

QUESTIONS, SAMPLES, SHOWN = 6, 3, 4
WINDOW = (1400, 1000)


@pytest.fixture(scope="module")
def chromium():
  path = shutil.which("chromium")
  if path is None:
    if os.environ.get("MGRPO_JAX_REQUIRE_WEIGHTS") == "1":
      pytest.fail("chromium required (MGRPO_JAX_REQUIRE_WEIGHTS=1): apt-get install chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)")
  return path


def _browse(chromium, tmp_path, page, *flags) -> subprocess.CompletedProcess:
  """Chromium headless on the file `page`, its own profile, no sandbox when root."""
  command = [chromium, "--headless", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
             *(["--no-sandbox"] if os.geteuid() == 0 else []), *flags, page.as_uri()]
  return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


class _Elements(html.parser.HTMLParser):
  """(tag, class) of every start tag."""

  def __init__(self):
    super().__init__()
    self.tags: list[tuple[str, str]] = []

  def handle_starttag(self, tag, attrs):
    self.tags.append((tag, dict(attrs).get("class") or ""))


def _elements(dom: str) -> list[tuple[str, str]]:
  parser = _Elements()
  parser.feed(dom)
  return parser.tags


@pytest.fixture(scope="module")
def oracle_evaluation(tmp_path_factory):
  """An evaluation of the noisy oracles on QUESTIONS test questions, SAMPLES each."""
  config = get_config()
  config.eval.viewer_questions = SHOWN
  config.logging.trajectory_questions = SHOWN
  root = tmp_path_factory.mktemp("run")
  world = WorldSetup.from_config(config)
  world_path = ensure_world(root, world)
  questions = load_questions(world_path, world, world.stage, split="test")[:QUESTIONS]
  tokenizer = agent_setup.world_tokenizer(root, TokenizerSetup.from_config(config))
  rendering = world.rendering
  mode = parse_mode(str(config.experiment.mode))
  main_spec, sub_spec = agent_setup.agent_specs(config, mode)
  setup = held_out.EvalSetup(
      mode=mode,
      registry=agent_setup.tool_registry(world_path, config, world="test_world"),
      rollout_config=agent_setup.rollout_config(config), questions=questions,
      main_spec=main_spec, sub_spec=sub_spec, rendering=rendering)
  result = held_out.evaluate(
      setup, Agent(OraclePolicy(rendering.main_oracle(0.3, 0), tokenizer), tokenizer),
      Agent(OraclePolicy(rendering.sub_oracle(0.3, 0), tokenizer), tokenizer),
      samples=SAMPLES, key=0)
  assert result.summary["sub_calls_mean"] > 0
  return config, RunPaths(str(root), root, str(root / "store")), questions, result


@pytest.fixture(scope="module")
def evaluation_page(oracle_evaluation):
  """The page of the evaluation: SHOWN of QUESTIONS questions."""
  config, paths, _, result = oracle_evaluation
  stage.write_page(config, paths, "final", result, result.summary)
  return paths.local / "report" / "eval_final.html"


@pytest.fixture(scope="module")
def step_page(oracle_evaluation):
  """The same rollouts as a training step's page (B = QUESTIONS, K = SAMPLES), with the
  step's R_M, A_M, and R_S, A_S and D-slot alignment of every S call."""
  config, paths, questions, result = oracle_evaluation
  outcome = step_math.MainStep.score(result.main, [q.id for q in questions], SAMPLES,
                                     step_math.CreditConfig.from_config(config))
  world = WorldSetup.from_config(config)
  _, test_world = world.split_worlds()
  step_pages.write_step_page(
      config, paths, parse_mode("mgrpo"), 0, outcome, result.main, result.sub,
      step_math.Scoring.of(questions, world.rendering.expert_judge(test_world)))
  return paths.local / "report" / "rl_step_00000.html", len(result.sub)


def test_a_step_page_shows_every_rollouts_credit_and_every_calls_slots(chromium, step_page,
                                                                       tmp_path):
  page, num_calls = step_page
  dom = _browse(chromium, tmp_path, page, "--dump-dom").stdout
  tags = _elements(dom)
  assert sum(t == "article" and "rollout" in c.split() for t, c in tags) == SHOWN * SAMPLES
  shown_calls = sum(t == "details" and c == "sub-call" for t, c in tags)
  assert 0 < shown_calls <= num_calls
  assert sum(c == "alignment" for _, c in tags) == shown_calls
  assert sum(c == "advantage" for _, c in tags) >= SHOWN * SAMPLES  # A_M, and A_S if kept


def test_the_dom_has_one_rollout_element_per_shown_rollout(chromium, evaluation_page,
                                                           tmp_path):
  dom = _browse(chromium, tmp_path, evaluation_page, "--dump-dom").stdout
  tags = _elements(dom)
  rollouts = [c for t, c in tags if t == "article" and "rollout" in c.split()]
  assert len(rollouts) == SHOWN * SAMPLES
  assert sum(t == "section" and c == "question" for t, c in tags) == SHOWN
  assert sum(t == "details" and c == "sub-call" for t, c in tags) > 0
  assert not [t for t, _ in tags if t == "script"]


def test_a_screenshot_of_the_page_is_not_blank(chromium, evaluation_page, tmp_path):
  from PIL import Image

  shot = tmp_path / "page.png"
  _browse(chromium, tmp_path, evaluation_page, f"--screenshot={shot}",
          f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars")
  with Image.open(shot) as image:
    assert image.size == WINDOW
    colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
  assert colours is None or len(colours) > 16, colours  # text, marks, panels: not one colour
  dominant = max(colours)[0] if colours else 0
  assert dominant < 0.95 * WINDOW[0] * WINDOW[1]


def test_hostile_trajectory_text_stays_text_in_the_browser(chromium, tmp_path):
  page = tmp_path / "hostile.html"
  page.write_text(trajectory_page.render("eval", trajectory_pages.questions()))
  dom = _browse(chromium, tmp_path, page, "--dump-dom").stdout
  tags = _elements(dom)
  assert "<title>eval</title>" in dom  # the trajectory's script did not run
  assert not [t for t, _ in tags if t in ("script", "b")]
  assert sum(t == "article" for t, _ in tags) == 5
