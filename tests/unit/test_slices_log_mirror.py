"""A `gs://` run's logs copied beside its workdir (`LogMirror`, with a local folder as the copy)."""

from __future__ import annotations

from mgrpo_jax.slices.log_mirror import LogMirror
from mgrpo_jax.store.folder import LocalFolder


class _CountingFolder(LocalFolder):

  def __init__(self, root):
    super().__init__(root)
    self.written = []

  def write(self, name, data):
    self.written.append(name)
    super().write(name, data)


def test_sync_copies_what_changed_and_restore_fetches_what_is_missing(tmp_path):
  local, remote = tmp_path / "machine_1" / "logs", _CountingFolder(tmp_path / "bucket")
  (local / "tensorboard").mkdir(parents=True)
  (local / "metrics.jsonl").write_text('{"step": 0}\n')
  (local / "tensorboard" / "events.1").write_bytes(b"e1")
  (local / "wandb").mkdir()
  (local / "wandb" / "run.log").write_text("W&B keeps its own copy")
  mirror = LogMirror(local, remote)
  mirror.sync()
  assert sorted(remote.written) == ["metrics.jsonl", "tensorboard/events.1"]
  with (local / "metrics.jsonl").open("a") as f:
    f.write('{"step": 1}\n')
  mirror.sync()
  assert remote.written[2:] == ["metrics.jsonl"]
  assert remote.read("metrics.jsonl") == b'{"step": 0}\n{"step": 1}\n'

  fresh = tmp_path / "machine_2" / "logs"
  LogMirror(fresh, remote).restore()
  assert (fresh / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n'
  assert (fresh / "tensorboard" / "events.1").read_bytes() == b"e1"
  assert not (fresh / "wandb").exists()
  (local / "metrics.jsonl").write_text("newer here\n")
  LogMirror(local, remote).restore()  # a file this machine has is kept
  assert (local / "metrics.jsonl").read_text() == "newer here\n"
