"""The step protocol of the two slices (docs/ALGORITHM.md, "The step protocol").

  run              `run_slice(slice, config, workdir, stage)`: what `launch/tpu_run.py`
                   calls; `run_children` starts a stage of both agents as processes
  pipeline         `--slice=all` as resumable stages: warm start, evaluation, RL, report
  main_slice       M's rollouts (S through the sub-agent service), outcomes, M's update
  sub_slice        the sub-agent service and S's update from the step's outcomes
  runtime          what both slices' loops stand on, built once (`open_runtime`)
  step_math        rewards, alignment and advantages of one step
  step_cache       write-ahead caches: a restarted slice reuses what it produced
  common           the settings the protocol relies on, the store, per-phase timing,
                   which steps' metrics are written (`logging.every`)
  faults           named crash points for restart tests
  run_fingerprint  the config keys that define a run, checked on every launch
"""

from mgrpo_jax.slices.run import run_slice

__all__ = ["run_slice"]
