"""A slice's logs beside its workdir: the local logs folder copied to a `store.folder`.

With a `gs://` workdir the metrics writer still writes locally (appending to a local
file is what metrics.jsonl and TensorBoard's event files need); `LogMirror` copies what
changed to `<workdir>/logs/<slice>/` after every written step (`sync`), and before the
writer opens, fetches the files this machine lacks (`restore`), so a slice restarted
on a fresh machine appends to its run's logs instead of starting new ones. Only
metrics.jsonl and `tensorboard/` are copied: W&B keeps its own copy of its `wandb/`
files on its server. With a local workdir the logs are written in place: no mirror.
"""

from __future__ import annotations

import os
import pathlib

from mgrpo_jax.store.folder import Folder

MIRRORED = ("metrics.jsonl", "tensorboard")


class LogMirror:
  """Keeps `remote` a copy of the mirrored files of the local folder `local`."""

  def __init__(self, local: pathlib.Path, remote: Folder):
    self.local = local
    self.remote = remote
    self._copied: dict[str, tuple[int, int]] = {}  # name -> (size, mtime_ns) last copied

  def restore(self) -> None:
    """Fetches the remote files that are missing here (a fresh machine)."""
    for name in self._remote_names():
      path = self.local / name
      if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.remote.read(name) or b"")

  def sync(self) -> None:
    """Copies the local files that changed since the last copy."""
    for name, path in self._local_files():
      stat = path.stat()
      signature = (stat.st_size, stat.st_mtime_ns)
      if self._copied.get(name) != signature:
        self.remote.write(name, path.read_bytes())
        self._copied[name] = signature

  def _remote_names(self) -> list[str]:
    return [n for top in MIRRORED for n in self.remote.list(top)
            if n == top or n.startswith(f"{top}/")]

  def _local_files(self) -> list[tuple[str, pathlib.Path]]:
    files = []
    for top in MIRRORED:
      root = self.local / top
      if root.is_file():
        files.append((top, root))
      for folder, _, names in os.walk(root):
        files.extend((pathlib.Path(folder, n).relative_to(self.local).as_posix(),
                      pathlib.Path(folder, n)) for n in names if not n.startswith("."))
    return sorted(files)
