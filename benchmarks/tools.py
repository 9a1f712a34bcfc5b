"""Benchmark: world build time and search latency, SQLite FTS5 vs a naive Python scan.

  .venv/bin/python benchmarks/tools.py [--sizes 10000,200000] [--queries 200]

For each world size: time to generate the graph, render the pages and write the FTS5
index file; then p50/p99 latency of `search(query)` (top 5) for entity-name queries
and question-text queries, against a peer measured in the same run: a straightforward
Python scan that scores every page by term counts (title weighted like the index) over
pre-lowercased texts, with the same query terms. The peer runs on a subset of the
queries (it is slow at large sizes); the ratio compares medians. Top-1 accuracy of
exact-name queries is reported for both.
"""

from __future__ import annotations

import argparse
import heapq
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tools.search import STOPWORDS, TITLE_WEIGHT, SearchIndex, build_index

_TERM = re.compile(r"\w+")


class NaiveScan:
  """The peer: score = TITLE_WEIGHT * title term count + body term count, top-n."""

  def __init__(self, page_list):
    self.titles = [p.title.lower() for p in page_list]
    self.texts = [p.text.lower() for p in page_list]
    self.ids = [p.page_id for p in page_list]

  def search(self, query: str, top_n: int = 5):
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(query)))
    terms = [t for t in terms if t not in STOPWORDS] or terms  # same terms as the index
    scored = []
    for title, text, pid in zip(self.titles, self.texts, self.ids, strict=True):
      score = sum(TITLE_WEIGHT * title.count(t) + text.count(t) for t in terms)
      if score:
        scored.append((score, -pid))
    return [-pid for _, pid in heapq.nlargest(top_n, scored)]


def _percentiles(seconds: list[float]) -> tuple[float, float]:
  ms = np.asarray(seconds) * 1e3
  return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def _time_queries(fn, queries):
  out = []
  for q in queries:
    start = time.perf_counter()
    fn(q)
    out.append(time.perf_counter() - start)
  return out


def run(size: int, n_queries: int, peer_queries: int, tmp: Path) -> dict:
  t0 = time.perf_counter()
  w = world.generate_world(size, 0)
  t1 = time.perf_counter()
  page_list = pages.render_pages(w)
  t2 = time.perf_counter()
  build_index(page_list, tmp / f"index_{size}.sqlite")
  t3 = time.perf_counter()
  index = SearchIndex.open(tmp / f"index_{size}.sqlite")
  rng = np.random.default_rng(0)
  ids = rng.choice(len(w), size=n_queries, replace=False).tolist()
  names = [w.names[i] for i in ids]
  texts = [q.text for q in questions.synthesize(w, n_queries, stage=2, seed=0)]
  fts_names = _time_queries(lambda q: index.search(q, 5), names)
  fts_texts = _time_queries(lambda q: index.search(q, 5), texts)
  fts_top1 = np.mean([index.search(n, 1)[0][1] == i for n, i in zip(names, ids, strict=True)])
  scan = NaiveScan(page_list)
  k = min(peer_queries, n_queries)
  peer_names = _time_queries(lambda q: scan.search(q, 5), names[:k])
  peer_texts = _time_queries(lambda q: scan.search(q, 5), texts[:k])
  peer_top1 = np.mean([scan.search(n, 1)[:1] == [i]
                       for n, i in zip(names[:k], ids[:k], strict=True)])
  return {
    "size": size, "generate_s": t1 - t0, "render_s": t2 - t1, "index_s": t3 - t2,
    "index_mb": (tmp / f"index_{size}.sqlite").stat().st_size / 2**20,
    "fts_names": _percentiles(fts_names), "fts_texts": _percentiles(fts_texts),
    "peer_names": _percentiles(peer_names), "peer_texts": _percentiles(peer_texts),
    "fts_top1": fts_top1, "peer_top1": peer_top1, "peer_n": k,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="10000,200000")
  parser.add_argument("--queries", type=int, default=200)
  parser.add_argument("--peer_queries", type=int, default=20)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    rows = [run(int(s), args.queries, args.peer_queries, Path(tmp))
            for s in args.sizes.split(",")]
  print("| pages | generate s | render s | FTS5 index s | index MiB |")
  print("|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['size']:,} | {r['generate_s']:.2f} | {r['render_s']:.2f} | "
          f"{r['index_s']:.2f} | {r['index_mb']:.1f} |")
  print()
  print("| pages | queries | FTS5 p50 / p99 ms | naive scan p50 / p99 ms | speed-up (p50) "
        "| top-1 exact name FTS5 / scan |")
  print("|---|---|---|---|---|---|")
  for r in rows:
    for kind in ("names", "texts"):
      fts, peer = r[f"fts_{kind}"], r[f"peer_{kind}"]
      top1 = (f"{r['fts_top1']:.3f} / {r['peer_top1']:.3f}" if kind == "names" else "-")
      print(f"| {r['size']:,} | {kind} ({args.queries}; scan {r['peer_n']}) | "
            f"{fts[0]:.2f} / {fts[1]:.2f} | {peer[0]:.1f} / {peer[1]:.1f} | "
            f"{peer[0] / fts[0]:.0f}x | {top1} |")


if __name__ == "__main__":
  main()
