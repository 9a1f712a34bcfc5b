"""Sweeps: loading, grids and run names, validation errors, launch commands and their
round trip through the launcher's config flag (ml_collections.config_flags)."""

from __future__ import annotations

import pathlib
import re
import shlex
import textwrap

import pytest
from absl import flags
from hypothesis import given
from hypothesis import strategies as st
from ml_collections import config_flags

from mgrpo_jax.config import apply_overrides, validate
from mgrpo_jax.config.sweep import (
  Run,
  Sweep,
  SweepError,
  axis,
  check_sweep,
  format_override,
  grid,
  launch_command,
  load_config_file,
  load_sweep,
)

pytestmark = pytest.mark.filterwarnings(  # config_flags loads config files with load_module()
    "ignore:the load_module:DeprecationWarning")

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCAL_DEMO = str(ROOT / "configs" / "local_demo.py")


def parse_like_launcher(argv: list[str]):
  """Parses a launch command's flags as launch/tpu_run.py does; returns the config."""
  flag_values = flags.FlagValues()
  flags.DEFINE_enum("slice", "all", ["main", "sub", "all"], "", flag_values=flag_values)
  flags.DEFINE_string("workdir", "", "", flag_values=flag_values)
  holder = config_flags.DEFINE_config_file("config", "configs/default.py", flag_values=flag_values,
                                           lock_config=True, sys_argv=argv)
  assert flag_values(argv) == [argv[0]]
  return holder.value


def lookup(config, key: str):
  for part in key.split("."):
    config = config[part]
  return config


def write_sweep(folder: pathlib.Path, body: str, name: str = "my_sweep.py") -> str:
  path = folder / name
  path.write_text("from mgrpo_jax.config.sweep import Run, Sweep, axis, grid\n\n"
                  + textwrap.dedent(body))
  return str(path)


def test_paper_comparison_is_arms_by_seeds_with_run_ids():
  sweep = load_sweep("configs/sweeps/paper_comparison.py", root=ROOT)
  assert sweep.name == "paper_comparison"
  assert sweep.base_config == "configs/local_demo.py"
  arms = ("mgrpo", "frozen_sub", "single_agent_long")
  expected = [(arm, seed) for arm in arms for seed in (0, 1, 2)]
  assert [run.name for run in sweep.runs] == [f"{a}-s{s}" for a, s in expected]
  single = {"experiment.mode": "single_agent", "warm_start.budget": "team_tokens",
            "warm_start.learning_rate": 3e-3, "main.limits.max_context": 1024,
            "main.optim.micro_batch_size": 8, "main.limits.shortest_train_length": 128}
  for run, (arm, seed) in zip(sweep.runs, expected, strict=True):
    team = "multi" if arm in ("mgrpo", "frozen_sub") else arm
    own = single if arm == "single_agent_long" else {"experiment.mode": arm}
    assert dict(run.overrides) == {**own, "experiment.seed": seed,
                                   "experiment.name": arm, "experiment.run_id": run.name,
                                   "warm_start.dir": f"../warm_start/{team}-s{seed}",
                                   "warm_start.epochs": 6,
                                   "experiment.compilation_cache_dir": "../jax_cache"}


def test_the_other_comparison_tables_share_its_workdir_and_warm_starts():
  """Every arm, the synchronization arms: runs of the same name are the same runs, and
  every team arm starts from the team's warm start of its seed."""
  core = {run.name: dict(run.overrides)
          for run in load_sweep("configs/sweeps/paper_comparison.py", root=ROOT).runs}
  arms = load_sweep("configs/sweeps/paper_arms.py", root=ROOT)
  sync = load_sweep("configs/sweeps/synchronization.py", root=ROOT)
  assert arms.name == sync.name == "paper_comparison"
  names = [run.name for run in arms.runs]
  assert [n for n in names if n.startswith("no_alignment")] == [
      f"no_alignment-s{s}" for s in range(5)]
  assert {"single_agent-s2", "shared_policy-s0", "mgrpo-s4"} <= set(names)
  assert [n for n in names if n.startswith("single_agent_long")] == [
      f"single_agent_long-s{s}" for s in range(5)]
  assert "single_agent-s3" not in names
  for run in arms.runs + sync.runs:
    overrides = dict(run.overrides)
    if run.name in core:
      assert overrides == core[run.name], run.name
    if overrides["experiment.mode"] not in ("single_agent", "shared_policy"):
      assert overrides["warm_start.dir"] == f"../warm_start/multi-s{overrides['experiment.seed']}"
  staleness = {run.name: dict(run.overrides) for run in sync.runs}
  assert staleness["staleness4-s1"]["mgrpo.staleness"] == 4
  assert staleness["staleness4-s1"]["checkpoint.keep"] == 5
  assert staleness["unsynchronized-s0"]["experiment.mode"] == "unsynchronized"


def test_alignment_mix_batches_the_delegation_mix_four_ways_at_two_d():
  sweep = load_sweep("configs/sweeps/alignment_mix.py", root=ROOT)
  assert sweep.base_config == "configs/local_demo.py:delegations" and len(sweep.runs) == 24
  by_name = {run.name: dict(run.overrides) for run in sweep.runs}
  assert by_name["duplicate_call-d6-s1"]["mgrpo.alignment"] == "duplicate_drop"
  assert by_name["duplicate_call-d6-s1"]["mgrpo.duplicate_weight"] == "call"
  assert "mgrpo.duplicate_weight" not in by_name["duplicate_drop-d6-s1"]
  assert by_name["mask-d3-s2"]["mgrpo.alignment"] == "mask"
  assert by_name["mask-d3-s2"]["mgrpo.aligned_sub_calls"] == 3
  assert by_name["no_alignment-d6-s0"]["experiment.mode"] == "no_alignment"
  assert {o["warm_start.dir"] for o in by_name.values()} == {
      f"../warm_start/delegations-s{s}" for s in range(3)}


def test_learning_rate_sweep_is_main_by_sub_by_seed():
  sweep = load_sweep("configs/sweeps/learning_rate.py", root=ROOT)
  assert len(sweep.runs) == 8
  first, last = sweep.runs[0], sweep.runs[-1]
  assert first.name == "mlr0.001-slr0.003-s0"
  assert last.name == "mlr0.0003-slr0.001-s1"
  assert dict(sweep.runs[2].overrides) == {
      "main.optim.learning_rate": 1e-3, "sub.optim.learning_rate": 1e-3,
      "experiment.seed": 0, "experiment.run_id": "mlr0.001-slr0.001-s0",
      "experiment.compilation_cache_dir": "../jax_cache", "warm_start.epochs": 6}


def test_grid_is_the_cartesian_product_first_axis_slowest():
  runs = grid(axis("experiment.mode", ("mgrpo", "frozen_sub")),
              axis("experiment.seed", (0, 1, 2), label="s{}"),
              fixed={"experiment.num_steps": 5}, run_id_key=None)
  assert [run.name for run in runs] == ["mgrpo-s0", "mgrpo-s1", "mgrpo-s2",
                                        "frozen_sub-s0", "frozen_sub-s1", "frozen_sub-s2"]
  assert dict(runs[4].overrides) == {"experiment.num_steps": 5,
                                     "experiment.mode": "frozen_sub", "experiment.seed": 1}


def test_grid_sets_the_run_id_last_and_labels_format_values():
  (run,) = grid(axis("main.optim.learning_rate", (3e-4,), label="lr{:g}"),
                fixed={"experiment.run_id": "ignored"})
  assert run.name == "lr0.0003"
  assert list(run.overrides.items()) == [("experiment.run_id", "lr0.0003"),
                                         ("main.optim.learning_rate", 3e-4)]


def test_grid_rejects_a_key_set_by_two_axes():
  with pytest.raises(SweepError, match=r"keys \['experiment.seed'\] are set by two axes"):
    grid(axis("experiment.seed", (0, 1)), axis("experiment.seed", (2,)))


def test_duplicate_run_names_are_rejected():
  with pytest.raises(SweepError, match="run name 'a' appears twice"):
    Sweep("s", "configs/local_demo.py", (Run("a", {}), Run("b", {}), Run("a", {})))


def test_a_grid_whose_labels_collide_is_rejected():
  runs = grid(axis("main.optim.learning_rate", (1e-3, 1.0001e-3), label="lr{:.1g}"))
  with pytest.raises(SweepError, match="run name 'lr0.001' appears twice"):
    Sweep("s", "configs/local_demo.py", runs)


@pytest.mark.parametrize("name", ["a/b", "", "-x", ".hidden", "a b"])
def test_run_names_must_be_folder_names(name):
  with pytest.raises(SweepError, match="run name"):
    Run(name, {})


def test_override_values_must_be_scalars():
  with pytest.raises(SweepError, match=r"run 'a': override 'experiment.seed' = \[1\]"):
    Run("a", {"experiment.seed": [1]})


def test_run_overrides_are_read_only():
  run = Run("a", {"experiment.seed": 1})
  with pytest.raises(TypeError):
    run.overrides["experiment.seed"] = 2


def test_select_keeps_sweep_order_and_names_unknown_runs():
  sweep = Sweep("s", "configs/local_demo.py", (Run("a", {}), Run("b", {}), Run("c", {})))
  assert [run.name for run in sweep.select(["c", "a"])] == ["a", "c"]
  with pytest.raises(SweepError, match="has no run 'x'; runs: a, b, c"):
    sweep.select(["a", "x"])


@pytest.mark.parametrize("overrides,key,message", [
    ({"experiment.seed": 1, "main.optim.lr": 1e-3}, "main.optim.lr", "is not a known setting"),
    ({"experiment.mode": "solo"}, "experiment.mode", "expected one of 'mgrpo'"),
    ({"experiment.seed": "1"}, "experiment.seed", "expected a int >= 0, got str"),
    ({"mgrpo.aligned_sub_calls": 8}, "mgrpo.aligned_sub_calls", "must be <= 'mgrpo.max_sub"),
])
def test_a_bad_override_fails_at_load_naming_file_run_and_key(tmp_path, overrides, key,
                                                                message):
  path = write_sweep(tmp_path, f"""
      def get_sweep():
        return Sweep("s", "configs/local_demo.py",
                     (Run("good", {{"experiment.seed": 3}}), Run("typo", {overrides!r})))
      """)
  with pytest.raises(SweepError) as error:
    load_sweep(path, root=ROOT)
  text = str(error.value)
  assert text.startswith(f"{path}: run 'typo': ")
  assert repr(key) in text and message in text


def test_runs_sharing_a_run_id_are_rejected(tmp_path):
  path = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep("s", "configs/local_demo.py", (Run("a", {"experiment.seed": 1}),
                                                    Run("b", {"experiment.run_id": "b"}),
                                                    Run("c", {"experiment.seed": 2})))
      """)
  with pytest.raises(SweepError, match=re.escape(
      f"{path}: runs 'a' and 'c' have the same experiment.run_id 'local_demo'")):
    load_sweep(path, root=ROOT)


def test_a_float_override_of_a_key_the_base_holds_as_int_is_rejected(tmp_path):
  # validate() accepts an int for a float key, but the launcher's config flag then parses
  # --config.<key> with int(): the float value could not reach the run.
  (tmp_path / "int_base.py").write_text(textwrap.dedent("""
      import ml_collections
      from mgrpo_jax.config import base_config

      def get_config():
        values = base_config().to_dict()
        values["serving"]["deadline_s"] = 60
        return ml_collections.ConfigDict(values)
      """))
  with pytest.raises(flags.IllegalFlagValueError, match="60.5"):
    parse_like_launcher(["tpu_run.py", f"--config={tmp_path / 'int_base.py'}",
                         "--config.serving.deadline_s=60.5"])
  path = write_sweep(tmp_path, f"""
      def get_sweep():
        return Sweep("s", {str(tmp_path / 'int_base.py')!r},
                     (Run("ok", {{"serving.deadline_s": 61}}),
                      Run("half", {{"serving.deadline_s": 60.5}})))
      """)
  with pytest.raises(SweepError, match=re.escape(
      f"{path}: run 'half': override 'serving.deadline_s' = 60.5: the launcher parses "
      "--config.serving.deadline_s as int (the base config holds 60)")):
    load_sweep(path)


@pytest.mark.parametrize("body,message", [
    ("X = 1\n", "AttributeError: .* has no attribute 'get_sweep'"),
    ("def get_sweep():\n  return {'name': 's'}\n", "get_sweep\\(\\) returned dict, not a Sweep"),
    ("def get_sweep():\n  return Sweep('s', 'configs/local_demo.py', ())\n",
     "sweep 's' has no runs"),
    ("def get_sweep():\n  return Sweep('s', 'configs/missing.py', (Run('a', {}),))\n",
     "base config 'configs/missing.py': FileNotFoundError"),
    ("def get_sweep():\n  return Sweep('s', 'configs/default.py:nope', (Run('a', {}),))\n",
     "base config 'configs/default.py:nope': ValueError: unknown preset 'nope'"),
    ("import no_such_module\n", "ModuleNotFoundError"),
])
def test_a_bad_sweep_file_fails_naming_the_file(tmp_path, body, message):
  path = write_sweep(tmp_path, body)
  with pytest.raises(SweepError, match=rf"^{re.escape(path)}: .*{message}"):
    load_sweep(path, root=ROOT)


def test_format_override_renders_each_type():
  assert format_override("logging.tensorboard", False, True) == "--config.logging.tensorboard=false"
  assert format_override("experiment.seed", 12, 0) == "--config.experiment.seed=12"
  assert format_override("main.optim.eps", 1e-10, 1e-8) == "--config.main.optim.eps=1e-10"
  assert format_override("main.optim.b1", 1, 0.9) == "--config.main.optim.b1=1"
  assert format_override("experiment.name", "a b'c", "x") == "--config.experiment.name=a b'c"
  with pytest.raises(SweepError, match="parses --config.experiment.seed as int"):
    format_override("experiment.seed", True, 0)
  with pytest.raises(SweepError, match="cannot hold a NUL character"):
    format_override("experiment.name", "a\0b", "x")


def test_launch_command_renders_and_quotes_a_run():
  sweep = Sweep("s", "configs/default.py:paper",
                (Run("r1", {"experiment.name": "my run", "experiment.seed": 2,
                            "logging.tensorboard": False}),))
  base = load_config_file(sweep.base_config, ROOT)
  command = launch_command(sweep, sweep.runs[0], base, "gs://bucket/sweeps/", slice_name="main",
                           extra_flags=["--dry_run"])
  assert command == [
      "python", "launch/tpu_run.py", "--slice=main", "--config=configs/default.py:paper",
      "--workdir=gs://bucket/sweeps/r1", "--config.experiment.name=my run",
      "--config.experiment.seed=2", "--config.logging.tensorboard=false", "--dry_run"]
  assert shlex.join(command) == (
      "python launch/tpu_run.py --slice=main --config=configs/default.py:paper "
      "--workdir=gs://bucket/sweeps/r1 '--config.experiment.name=my run' "
      "--config.experiment.seed=2 --config.logging.tensorboard=false --dry_run")


@pytest.mark.parametrize("sweep_file",
                         sorted(p.name for p in (ROOT / "configs" / "sweeps").glob("*.py")))
def test_every_shipped_run_round_trips_through_the_launchers_config_flag(
    sweep_file, monkeypatch):
  monkeypatch.chdir(ROOT)
  sweep = load_sweep(f"configs/sweeps/{sweep_file}")
  base = load_config_file(sweep.base_config)
  for run in sweep.runs:
    argv = shlex.split(shlex.join(launch_command(sweep, run, base, "runs/x")))
    config = parse_like_launcher(argv[1:])
    validate(config)
    expected = load_config_file(sweep.base_config)
    apply_overrides(expected, dict(run.overrides))
    assert config.to_dict() == expected.to_dict(), run.name


@pytest.mark.parametrize("text", ["", "-x", "--", "a=b", "true", "1e3", "None", " x ", "a\nb",
                                  "'\"", "$HOME `id`", "h\u00e9llo \u2603", "--config.x=1"])
def test_tricky_strings_round_trip(text):
  sweep = Sweep("s", LOCAL_DEMO, (Run("r", {"serving.token_env": text}),))
  base = load_config_file(LOCAL_DEMO)
  argv = shlex.split(shlex.join(launch_command(sweep, sweep.runs[0], base, "runs/s")))
  assert parse_like_launcher(argv[1:]).serving.token_env == text


_COMMAND_LINE_TEXT = st.text(st.characters(exclude_categories=("Cs",),
                                           exclude_characters="\0"))


# A run id is one store key segment (validate refuses others); AdamW's beta is < 1; a
# trained agent's learning rate is > 0.
_RUN_ID = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}", fullmatch=True)


@given(name=_COMMAND_LINE_TEXT.filter(bool), run_id=_RUN_ID, token_env=_COMMAND_LINE_TEXT,
       seed=st.integers(0, 2**70), learning_rate=st.floats(0.0, 1.0, exclude_min=True),
       b1=st.one_of(st.integers(0, 0), st.floats(0.0, 1.0, exclude_max=True)),
       tensorboard=st.booleans())
def test_arbitrary_values_round_trip_through_the_shell_and_the_config_flag(
    name, run_id, token_env, seed, learning_rate, b1, tensorboard):
  overrides = {"experiment.name": name, "experiment.run_id": run_id,
               "serving.token_env": token_env, "experiment.seed": seed,
               "main.optim.learning_rate": learning_rate, "sub.optim.b1": b1,
               "logging.tensorboard": tensorboard}
  sweep = Sweep("s", LOCAL_DEMO, (Run("r", overrides),))
  base = load_config_file(LOCAL_DEMO)
  check_sweep(sweep, base, "test")
  command = launch_command(sweep, sweep.runs[0], base, "runs/s")
  argv = shlex.split(shlex.join(command))
  assert argv == command
  config = parse_like_launcher(argv[1:])
  for key, value in overrides.items():
    parsed = lookup(config, key)
    assert parsed == value and type(parsed) is type(lookup(base, key)), key
  expected = base.copy_and_resolve_references()
  apply_overrides(expected, overrides)
  assert config.to_dict() == expected.to_dict()  # and nothing else changed


def test_each_tables_command_keeps_the_warm_start_its_table_was_measured_with():
  """The demo fine-tunes 12 passes; the tables measured at 6 (the comparison's sweeps, the
  learning-rate sweep, the shortened demo, the alignment mix, stage 2) still get 6, and the
  sharpening arm that chose 12 gets 12."""
  def epochs(base: str, overrides=()) -> int:
    config = load_config_file(base, ROOT)
    apply_overrides(config, dict(overrides))
    return int(config.warm_start.epochs)

  assert epochs("configs/local_demo.py") == 12
  for preset in ("short", "delegations", "two_stage"):
    assert epochs(f"configs/local_demo.py:{preset}") == 6, preset
  for path in ("paper_comparison", "paper_arms", "synchronization", "learning_rate",
               "sharpening", "alignment_mix", "test_worlds"):
    sweep = load_sweep(f"configs/sweeps/{path}.py", root=ROOT)
    for run in sweep.runs:
      expected = 12 if path == "test_worlds" or run.name.startswith("val_epochs12") else 6
      assert epochs(sweep.base_config, run.overrides) == expected, run.name
