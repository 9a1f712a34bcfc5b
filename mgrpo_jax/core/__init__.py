"""Pure, jitted M-GRPO math: rewards, group advantages, alignment and the policy loss.

Imports nothing else from the project. Modules:
  rewards     R_M and R_S (paper section 3.2).
  advantages  group-relative advantages (Eq. 9-13).
  alignment   a fixed D sub-agent slots per rollout (section 4.1).
  losses      clipped surrogate objective and its reductions (Eq. 14-19).
"""

from mgrpo_jax.core import advantages, alignment, losses, rewards

__all__ = ["advantages", "alignment", "losses", "rewards"]
