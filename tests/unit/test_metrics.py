"""metrics.jsonl, TensorBoard event files, and a step's console lines (short and full)."""

import json
import sys

import pytest

from mgrpo_jax.metrics import MetricsWriter, format_progress, format_step, read_metrics


def test_writer_appends_jsonl_and_tensorboard_events(tmp_path):
  with MetricsWriter(tmp_path) as writer:
    writer.write(1, {"main/reward_mean": 0.25, "sub/reward_mean": 0.5})
    writer.write(2, {"main/reward_mean": 0.75, "time/rollout_s": 1.5})
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line)["step"] for line in lines] == [1, 2]
  assert json.loads(lines[1])["main/reward_mean"] == 0.75
  events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
  assert len(events) == 1 and events[0].stat().st_size > 0


def _tensorboard_scalars(folder) -> list[tuple[int, str, float]]:
  from tensorboardX.proto import event_pb2  # the same protobufs TensorBoard reads

  (event_file,) = (folder / "tensorboard").glob("events.out.tfevents.*")
  data = event_file.read_bytes()
  values, offset = [], 0
  while offset < len(data):  # TFRecord framing: u64 length, u32 crc, payload, u32 crc
    length = int.from_bytes(data[offset:offset + 8], "little")
    event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
    offset += 16 + length
    values += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
  return values


def test_tensorboard_events_hold_the_scalars(tmp_path):
  with MetricsWriter(tmp_path) as writer:
    writer.write(7, {"main/reward_mean": 0.5})
  assert _tensorboard_scalars(tmp_path) == [(7, "main/reward_mean", 0.5)]


def test_a_provisional_line_is_jsonl_only_and_the_full_line_wins(tmp_path):
  with MetricsWriter(tmp_path) as writer:
    writer.write(0, {"main/reward_mean": 0.5}, provisional=True)
    writer.write(0, {"main/reward_mean": 0.5, "time/checkpoint_s": 0.125})
    writer.write(1, {"main/reward_mean": 0.75}, provisional=True)  # then killed
  assert [(r["step"], "time/checkpoint_s" in r) for r in read_metrics(
      tmp_path / "metrics.jsonl")] == [(0, True), (1, False)]
  assert _tensorboard_scalars(tmp_path) == [(0, "main/reward_mean", 0.5),
                                            (0, "time/checkpoint_s", 0.125)]


def test_a_step_already_written_is_not_written_again(tmp_path):
  """A slice that falls back to an older checkpoint redoes steps whose full lines exist:
  they are left as they were (was: every redo appended two more lines); a step that only
  has its provisional line (killed before its commit) is written in full; a torn last
  line is cut before appending."""
  with MetricsWriter(tmp_path) as writer:
    for step in range(3):
      writer.write(step, {"a": float(step)}, provisional=True)
      if step < 2:
        writer.write(step, {"a": float(step), "time/checkpoint_s": 0.5})
  with (tmp_path / "metrics.jsonl").open("a") as f:
    f.write('{"step": 3, "a"')  # killed mid-line
  with MetricsWriter(tmp_path) as writer:
    for step in range(4):
      writer.write(step, {"a": 10.0 + step}, provisional=True)
      writer.write(step, {"a": 10.0 + step, "time/checkpoint_s": 0.5})
  lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [(r["step"], r.get("provisional", False)) for r in lines] == [
      (0, True), (0, False), (1, True), (1, False), (2, True), (2, True), (2, False),
      (3, True), (3, False)]
  assert [r["a"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0.0, 1.0, 12.0, 13.0]
  points = {(s, v) for s, tag, v in _tensorboard_scalars_all(tmp_path) if tag == "a"}
  assert {(2, 12.0), (3, 13.0)} <= points and not {(0, 10.0), (1, 11.0)} & points


def _tensorboard_scalars_all(folder) -> list[tuple[int, str, float]]:
  """The scalars of every event file in `folder` (one per writer), in file order."""
  from tensorboardX.proto import event_pb2

  values = []
  for event_file in sorted((folder / "tensorboard").glob("events.out.tfevents.*")):
    data, offset = event_file.read_bytes(), 0
    while offset < len(data):
      length = int.from_bytes(data[offset:offset + 8], "little")
      event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
      offset += 16 + length
      values += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
  return values


def test_rejects_non_numeric_and_reserved_names(tmp_path):
  with MetricsWriter(tmp_path, tensorboard=False) as writer:
    with pytest.raises(ValueError, match="metric 'x' at step 3 is not a number"):
      writer.write(3, {"x": "high"})
    with pytest.raises(ValueError, match="reserved"):
      writer.write(3, {"step": 1.0})
    with pytest.raises(ValueError, match="reserved"):
      writer.write(3, {"provisional": 1.0})


def test_read_keeps_last_line_per_step_and_skips_a_torn_tail(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a": 2.0}\n{"step": 2, "a": 3.0}\n'
                  '{"step": 3, "a"')
  assert [(r["step"], r["a"]) for r in read_metrics(path)] == [(1, 1.0), (2, 3.0)]


def test_read_names_the_malformed_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
  with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not a metrics record"):
    read_metrics(path)


def test_progress_line():
  line = format_progress(3, 10, {"main/reward": 0.41, "sub/reward": 0.3333},
                         {"rollout": 1.234, "update": 0.4}, {"main": 512.4})
  assert line == ("step 3/10 | main/reward 0.41 sub/reward 0.333 | rollout 1.23s update 0.40s"
                  " | main 512 tok/s")
  assert format_progress(1, 1, {}) == "step 1/1"


def test_step_line():
  line = format_step(3, 10, {"R_M": 0.41, "correct": 0.3333, "calls": 81.0}, 3.14)
  assert line == "step 3/10 | R_M 0.41 correct 0.333 calls 81 | 3.1 s/step"
  assert format_step(1, 1, {}, 0.04) == "step 1/1 | 0.0 s/step"


def test_wandb_on_without_the_package_fails_naming_the_key(monkeypatch, tmp_path):
  from mgrpo_jax.config import apply_overrides, base_config
  from mgrpo_jax.metrics import WandbRun
  from mgrpo_jax.slices.run import run_slice

  monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
  message = r"logging\.wandb\.enabled=true needs the wandb package: pip install 'mgrpo_jax\[wandb\]'"
  with pytest.raises(ImportError, match=message):
    WandbRun(tmp_path, project="p", entity="", mode="offline", group="g", slice_name="main",
             config={})
  config = base_config()
  apply_overrides(config, {"logging.wandb.enabled": True})
  with pytest.raises(ImportError, match=message):  # before any stage starts
    run_slice("all", config, str(tmp_path))
  assert list(tmp_path.iterdir()) == []


def test_wandb_mode_is_checked_naming_the_key():
  from mgrpo_jax.config import ConfigError, apply_overrides, base_config, validate

  config = base_config()
  apply_overrides(config, {"logging.wandb.mode": "cloud"})
  with pytest.raises(ConfigError, match=r"logging\.wandb\.mode.*offline"):
    validate(config)


def test_phase_progress_writes_a_line_at_most_every_interval_with_the_time_left():
  from mgrpo_jax.metrics import PhaseProgress

  now = [100.0]
  lines = []
  progress = PhaseProgress("warm start main (sft)", lines.append, every_s=20.0,
                           clock=lambda: now[0])
  for done, at in ((1, 105.0), (2, 119.0), (3, 120.0), (4, 130.0), (5, 141.0), (8, 190.0)):
    now[0] = at
    progress(done, 8)
  assert lines == ["warm start main (sft): 3/8 steps, 20 s, about 33 s left",
                   "warm start main (sft): 5/8 steps, 41 s, about 25 s left"]
