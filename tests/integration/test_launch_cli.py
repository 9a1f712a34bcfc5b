"""The launcher's command line: help, bad flags and bad config keys exit 2 with one line."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args, cwd=ROOT):
  return subprocess.run([sys.executable, str(ROOT / "launch" / "tpu_run.py"), *args],
                        capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help_documents_every_flag():
  proc = run("--help")
  assert proc.returncode == 0
  for flag in ("--slice", "--stage", "--config", "--workdir", "--gin_file", "--gin_bindings",
               "--[no]verbose", "--[no]print_config", "--[no]dry_run", "--dry_run_hbm_gib",
               "--coordinator_address", "--num_processes", "--process_id"):
    assert flag in proc.stdout, flag
  assert "<main|sub|both|all>" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["--slice=pair"], "flag --slice=pair: value should be one of <main|sub|both|all>"),
    (["--config.main.optim.lr=1"], "config key 'main.optim.lr' is not a known setting"),
    (["--config.experiment.seed=abc"], "--config.experiment.seed=abc: invalid literal"),
    (["--config.mgrpo.rollouts_per_query=1"],
     "config key 'mgrpo.rollouts_per_query': expected a int >= 2, got 1"),
    (["--config.experiment.mode=solo"], "config key 'experiment.mode': expected one of"),
    (["--config=configs/missing.py"], "No such file or directory: 'configs/missing.py'"),
    (["--config=configs/default.py:nope"], "unknown preset 'nope'"),
    (["--gin_bindings=no_such.fn = 1"], "gin: No configurable matching 'no_such'"),
    (["stray"], "unexpected arguments: stray"),
    (["--num_processes=0"], "flag --num_processes=0: 0 is not a positive integer"),
    (["--process_id=-1"], "flag --process_id=-1: -1 is not a non-negative integer"),
    (["--dry_run_hbm_gib=-1"], "flag --dry_run_hbm_gib=-1: -1.0 is not a non-negative"),
    (["--coordinator_address=nohost"], "must be '', 'auto' or host:port, got 'nohost'"),
    (["--num_processes=2"], "need an explicit coordinator_address host:port"),
    (["--slice=main", "--coordinator_address=h:1", "--num_processes=2", "--process_id=2"],
     "process_id must be in [0, num_processes=2), got 2"),
    (["--coordinator_address=auto"], "--coordinator_address needs --slice=main or"),
    (["--stage=warm_start"], "--stage=warm_start needs --slice=main or --slice=sub"),
    (["--slice=main", "--stage=sft"],
     "flag --stage=sft: value should be one of <rl|warm_start|eval_before|eval_after|select_stage2>"),
    (["--slice=sub", "--stage=eval_after"], "--stage=eval_after evaluates the whole system"),
    (["--config.main.optim.learning_rate=nan"],
     "config key 'main.optim.learning_rate': expected a finite float"),
    (["--config.sub.sampling.max_new_tokens=2048"],
     "config key 'sub.sampling.max_new_tokens': must be < sub.limits.max_context = 1024"),
    (["--config.serving.host=0.0.0.0"],
     "config key 'serving.host': '0.0.0.0' is reachable from other machines"),
    (["--config.experiment.run_id=../x"], "config key 'experiment.run_id': '../x' is not a"),
    (["--config.main.sampling.temperature=0"], "config key 'main.sampling.temperature': RL "
     "samples K rollouts per query: at 0 they are identical"),
    (["--config.sub.optim.learning_rate=0"],
     "config key 'sub.optim.learning_rate': experiment.mode='mgrpo' trains sub: must be > 0"),
    (["--config.serving.host=0.0.0.0", "--config.serving.token_env=T"],
     "config key 'serving.host': '0.0.0.0' is reachable from other machines, so the "
     "sub-agent service needs TLS"),
    (["--slice=both", "--stage=warm_start"], "--stage=warm_start needs --slice=main or"),
])
def test_bad_input_exits_2_with_one_line_naming_it(args, message):
  proc = run(*args, "--print_config")
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert message in lines[0]


@pytest.mark.parametrize("args,message", [
    (["--workdir=/proc/no-such-process/run"], "--workdir=/proc/no-such-process/run: cannot "
     "create or write /proc/no-such-process"),
    (["--workdir=/sys/fs/run"], "--workdir=/sys/fs/run: cannot create or write /sys/fs/run"),
    (["--config.serving.token_env=MGRPO_UNSET_TOKEN"], "config key 'serving.token_env': names "
     "the environment variable 'MGRPO_UNSET_TOKEN', which is unset or empty"),
    (["--config.serving.tls_cert=/no/cert.pem", "--config.serving.tls_key=/no/key.pem"],
     "config key 'serving.tls_cert': /no/cert.pem is not a readable file"),
])
def test_a_start_up_error_outside_the_config_exits_2_with_one_line(args, message, tmp_path):
  """What a valid config names outside itself (a workdir that cannot be created or
  written, such as /proc/x or a read-only mount, the token's variable, the TLS files)
  fails at start, naming the path or key (was: a traceback, exit 1, or a crash later)."""
  for slice_name in ("main", "sub", "all"):
    proc = run(f"--slice={slice_name}", *args, *(
        [] if any(a.startswith("--workdir") for a in args) else [f"--workdir={tmp_path}"]))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
  assert not list(tmp_path.iterdir())  # nothing ran


def test_print_config_applies_preset_override_and_gin_binding():
  proc = run("--config=configs/default.py:paper", "--config.sub.optim.learning_rate=3e-6",
             "--gin_bindings=mgrpo_jax.plugins.sub_reward_fn.fn = None", "--print_config")
  assert proc.returncode == 0, proc.stderr
  assert "rollouts_per_query: 8" in proc.stdout
  assert "learning_rate: 3.0e-06" in proc.stdout
  assert "sub_reward_fn.fn = None" in proc.stdout


def test_dry_run_with_an_unknown_model_exits_2_naming_the_key():
  proc = run("--dry_run", "--config.main.model.preset=no_such_model")
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "main.model.preset: 'no_such_model' is neither" in lines[0]


def test_resuming_with_another_defining_value_exits_2_naming_the_key(tmp_path):
  """The first launch records the run's defining keys (here written as that launch would),
  a relaunch with another K is refused before anything runs."""
  from mgrpo_jax.config import base_config
  from mgrpo_jax.slices.run_fingerprint import check_fingerprint

  check_fingerprint(base_config(), str(tmp_path))  # configs/default.py's values
  proc = run("--slice=main", f"--workdir={tmp_path}", "--config.mgrpo.rollouts_per_query=4")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert (f"config key 'mgrpo.rollouts_per_query' is 4, but the run in {tmp_path} was "
          "started with 8") in lines[0]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["run_config.json"]  # nothing ran


def test_a_shared_warm_start_of_other_values_exits_2_naming_the_key(tmp_path):
  """A warm-start folder records what it was computed from (here written as the first run
  would); a run of another test world that names it is refused before anything runs."""
  from configs.local_demo import get_config
  from mgrpo_jax.config.modes import parse_mode
  from mgrpo_jax.warm_start.folder_config import check_or_record

  shared = tmp_path / "warm_start"
  shared.mkdir()
  config = get_config("short")
  check_or_record(config, parse_mode(str(config.experiment.mode)), shared, built=False)
  proc = run("--slice=all", "--config=configs/local_demo.py:short",
             f"--workdir={tmp_path / 'run'}", f"--config.warm_start.dir={shared}",
             "--config.world.test_seed=2")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert (f"warm start folder {shared} was computed with world.test_seed=1, but this run "
          "has 2") in lines[0]
  assert sorted(p.name for p in shared.iterdir()) == [".lock", "warm_start_config.json"]
