"""benchmarks/xla_profile.py reads a real profiler trace of a jitted call: its three HLO
ops and none of the runtime's events, the dot counted as a matmul, and the groups adding
up to the ops' time."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.benchmark_modules import import_benchmark

xla_profile = import_benchmark("xla_profile")


def test_op_groups_name_matmuls_layout_copies_and_the_rest():
  groups = xla_profile.op_group
  assert [groups(k) for k in ("ynn_fusion", "dot", "xnn_fusion", "onednn_matmul")] == [
      "matmul"] * 4
  assert groups("copy_bitcast_fusion") == groups("transpose_copy_fusion") == "transpose"
  assert groups("subtract_exponential_fusion") == groups("reduce") == "other"


def test_a_traced_call_splits_into_its_ops(tmp_path):
  a = jnp.asarray(np.random.default_rng(0).standard_normal((512, 512)), jnp.float32)
  step = jax.jit(lambda x: (jnp.tanh(x) @ x).T + 1.0)
  step(a).block_until_ready()  # compiled outside the trace
  profile = xla_profile.profile_ops(lambda: step(a), str(tmp_path))
  ops = dict(profile["top"])
  # jax 0.10's CPU runtime: a dot, the tanh, the transposed add; no runtime events
  assert len(ops) == 3 and "dot" in ops and not any(":" in op or " " in op for op in ops)
  assert profile["groups"]["matmul"] == ops["dot"] > 0.0
  assert sum(profile["groups"].values()) == pytest.approx(sum(ops.values()))
  lines = xla_profile.format_profile(profile)
  assert lines[0].startswith("XLA ops of one step:") and lines[1].split()[0] == "matmul"
