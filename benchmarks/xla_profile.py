"""Where one jitted call spends its time on the CPU: XLA's ops from a profiler trace.

`profile_ops(run, trace_dir)` runs `run()` (one call, waited for) under `jax.profiler`
and reads back the trace: XLA's CPU runtime records every op it executes (a fusion, a
dot, a copy) as one event named after the op in the compiled HLO (`ynn_fusion.7`,
`copy_bitcast_fusion.2`, ...). The op's kind is its name without the number. Kinds fall
in three groups:

  matmul     dots: YNNPACK / XNNPACK / oneDNN fusions and XLA's own `dot`
  transpose  fusions whose name says they copy or transpose (an elementwise result
             written in another layout, e.g. for a weight-gradient dot)
  other      every other op (elementwise and reduction fusions, loops' bodies)

Only events named like an HLO op are counted: the runtime's own (the executor, buffer
allocation, the thread pool) are not ops, and `while` loops contain the ops of their
bodies, which are counted themselves.
"""

from __future__ import annotations

import collections
import gzip
import json
import pathlib
import re
from collections.abc import Callable

_HLO_OP = re.compile(r"[a-z][a-z0-9_\-]*(\.[0-9]+)?")
_MATMUL_KINDS = ("ynn_fusion", "xnn_fusion", "onednn", "dot")


def op_group(kind: str) -> str:
  """"matmul", "transpose" or "other" for an op kind (module docstring)."""
  if kind.startswith(_MATMUL_KINDS):
    return "matmul"
  if "copy" in kind or "transpose" in kind:
    return "transpose"
  return "other"


def profile_ops(run: Callable[[], object], trace_dir: str) -> dict:
  """Seconds of XLA's ops in one `run()`: {"groups": {group: s}, "kinds": {kind: s},
  "top": [(op, s), ...] (the ten longest ops)}."""
  import jax

  jax.profiler.start_trace(trace_dir)
  jax.block_until_ready(run())
  jax.profiler.stop_trace()
  trace = max(pathlib.Path(trace_dir).rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
  events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
  per_op: collections.Counter = collections.Counter()
  for event in events:
    name = event.get("name", "")
    if event.get("ph") == "X" and _HLO_OP.fullmatch(name) and not name.startswith("while"):
      per_op[name] += event["dur"] / 1e6
  kinds: collections.Counter = collections.Counter()
  groups: collections.Counter = collections.Counter()
  for op, seconds in per_op.items():
    kind = op.split(".")[0]
    kinds[kind] += seconds
    groups[op_group(kind)] += seconds
  return {"groups": dict(groups), "kinds": dict(kinds.most_common(8)),
          "top": per_op.most_common(10)}


def format_profile(profile: dict) -> list[str]:
  """Lines of `profile_ops`'s result: groups with their share, then the longest kinds
  and ops."""
  total = sum(profile["groups"].values())
  lines = [f"XLA ops of one step: {total:.2f} s"]
  for group in ("matmul", "transpose", "other"):
    seconds = profile["groups"].get(group, 0.0)
    lines.append(f"  {group:<10}{seconds:8.2f} s  {seconds / total:6.1%}")
  lines.append("  longest kinds: " + ", ".join(f"{k} {s:.2f} s"
                                               for k, s in profile["kinds"].items()))
  lines.append("  longest ops: " + ", ".join(f"{op} {s:.3f} s" for op, s in profile["top"][:5]))
  return lines
