"""An example of a user's own component registered through gin (docs/OWN_DATA.md).

  PYTHONPATH=. python launch/tpu_run.py --slice=all --config=configs/local_demo.py:natural \
      --config.world.source=jsonl \
      --config.world.source_path=configs/examples/my_questions.jsonl \
      --config.world.source_fields=id=qid,question=prompt,answer=gold \
      --config.rewards.b3=0 --gin_file=configs/examples/my_questions.gin

`lenient_main_reward` replaces R_M: a well-formed trajectory earns 0.2, a correct
answer 1.0 more.
"""

import gin
import numpy as np


@gin.configurable
def lenient_main_reward(format_ok, correct, *, a1, a2):
  """R_M [Q, K] = 0.2 * format_ok + correct (a1, a2 of the config are not used)."""
  del a1, a2
  return 0.2 * np.asarray(format_ok, np.float32) + np.asarray(correct, np.float32)
