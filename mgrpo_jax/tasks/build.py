"""Builds the offline deep-research datasets and search indexes.

  python -m mgrpo_jax.tasks.build --world=tiny --seed=0 --out=/tmp/world

writes <out>/tfds (ArrayRecord datasets `deep_research_tasks` and
`deep_research_corpus`, config "<world>_seed<seed>"), <out>/index/train_world.sqlite and
<out>/index/test_world.sqlite (SQLite FTS5 indexes), and <out>/manifest.json (the spec
and the SHA-256 of every data file). `--world` is tiny | small | medium | large or a page
count. The same arguments give byte-identical data files.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import pathlib
import sys
import tempfile

from mgrpo_jax.tasks import datasets as datasets_lib
from mgrpo_jax.tasks import tfds_builder
from mgrpo_jax.tasks.renderings import RENDERINGS, get_rendering
from mgrpo_jax.tools.search import build_index

DATA_SUFFIXES = (".sqlite", ".array_record")


def file_digests(root: str | os.PathLike) -> dict[str, str]:
  """{relative path: sha256} of the data files (ArrayRecord shards, indexes) under root."""
  out = {}
  for path in sorted(pathlib.Path(root).rglob("*")):
    if path.is_file() and any(s in path.name for s in DATA_SUFFIXES):
      out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
  return out


@contextlib.contextmanager
def _without_tfds_scratch():
  """Removes the empty `tmp*tfds` folders that tensorflow-datasets leaves in the temporary
  directory: it makes one for every builder constructed before its data exists (to fetch
  a precomputed DatasetInfo from its bucket, which it does not consult) and never removes
  it. Only empty folders made during the block are removed."""
  pattern = os.path.join(tempfile.gettempdir(), "tmp*tfds")
  before = set(glob.glob(pattern))
  try:
    yield
  finally:
    for path in set(glob.glob(pattern)) - before:
      with contextlib.suppress(OSError):  # not empty, or already gone: not ours to remove
        os.rmdir(path)


def build(world: str, seed: int, out: str | os.PathLike, *, test_seed: int | None = None,
          num_train: int = 400, num_validation: int = 50, num_test: int = 100,
          render: str = "natural") -> dict:
  """Writes datasets and indexes under `out`; returns the manifest."""
  rendering = get_rendering(render)
  rendering.check_size(world)
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()
  out = pathlib.Path(out)
  config = tfds_builder.world_config(world, seed, test_seed, render=render,
                                     num_train=num_train, num_validation=num_validation,
                                     num_test=num_test)
  for cls in (tfds_builder.DeepResearchTasks, tfds_builder.DeepResearchCorpus):
    with _without_tfds_scratch():
      builder = tfds_builder.make_builder(cls, config, str(out / "tfds"))
    builder.download_and_prepare()
  spec = config.spec
  worlds = datasets_lib.make_split_worlds(spec.world, spec.seed, spec.test_seed, render)
  for name, w in zip(("train_world", "test_world"), worlds, strict=False):
    build_index(rendering.render_pages(w), out / "index" / f"{name}.sqlite")
  manifest = {"spec": {k: getattr(spec, k) for k in spec.__dataclass_fields__},
              "config": config.name, "files": file_digests(out)}
  (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
  return manifest


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--world", default="tiny", help="tiny|small|medium|large or a page count")
  parser.add_argument("--seed", type=int, default=0, help="train/validation world seed")
  parser.add_argument("--test_seed", type=int, default=None, help="test world seed (seed+1)")
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--num_train", type=int, default=400, help="train questions per stage")
  parser.add_argument("--num_validation", type=int, default=50)
  parser.add_argument("--num_test", type=int, default=100)
  parser.add_argument("--render", default="natural", choices=RENDERINGS,
                      help="natural sentences or one token per symbol")
  args = parser.parse_args(argv)
  try:
    manifest = build(args.world, args.seed, args.out, test_seed=args.test_seed,
                     num_train=args.num_train, num_validation=args.num_validation,
                     num_test=args.num_test, render=args.render)
  except ValueError as exc:
    parser.error(str(exc))
  sys.stdout.write(json.dumps(manifest["files"], indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
