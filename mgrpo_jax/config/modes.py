"""`experiment.mode` as a `Mode`: which agents exist, which are trained, and how.

  mode           agents (own weights)  sub-agent  sub slice  RL updates S  S aligned to D
  mgrpo          main, sub             yes        yes        yes           yes
  frozen_sub     main, sub             yes        yes        no            yes
  no_alignment   main, sub             yes        yes        yes           no (arrival order)
  unsynchronized main, sub             yes        yes        yes           no (a FIFO of calls
                                                                             across steps)
  shared_policy  main                  yes (M's)  no         with M        yes
  single_agent   main (the single)     no         no         -             -

The rest of the project asks a `Mode` these questions instead of comparing mode names;
a process parses the config's once, at its entry point (`slices.run.run_slice`, the
export), and hands the `Mode` down. Pure Python, so config validation, the
agents and the trainers all read the same table (docs/ALGORITHM.md, "Modes").
"""

from __future__ import annotations

import dataclasses

MODES = ("mgrpo", "frozen_sub", "no_alignment", "unsynchronized", "shared_policy",
         "single_agent")


@dataclasses.dataclass(frozen=True)
class Mode:
  """What one experiment mode means (module docstring).

  Attributes:
    name: the mode's name, one of `MODES`.
    agents: the roles with their own weights: warm-started, checkpointed, evaluated and
      exported ("main" is the single agent in single_agent, the one shared policy in
      shared_policy).
    sub_agent: whether M delegates to a sub-agent S.
    decoupled: whether S is its own policy, served and trained by the sub slice.
    sub_trained: whether RL updates S on its own aligned batch (in the sub slice).
    aligned: whether S's records are aligned to D slots per rollout (else grouped in
      arrival order).
    queued: whether S trains from a FIFO of finished calls carried across steps (the
      paper's unsynchronized arm, its section 5.3.3; `slices/sub_queue.py`) instead of
      the step's own calls.
  """

  name: str
  agents: tuple[str, ...]
  sub_agent: bool
  decoupled: bool
  sub_trained: bool
  aligned: bool
  queued: bool = False

  @property
  def single(self) -> bool:
    """One agent, no sub-agent (single_agent)."""
    return not self.sub_agent

  @property
  def shared(self) -> bool:
    """One policy plays M and S, both trained in the main slice (shared_policy)."""
    return self.sub_agent and not self.decoupled

  @property
  def main_role(self) -> str:
    """The spec role of the main agent: "single" without a sub-agent, else "main"."""
    return "single" if self.single else "main"

  @property
  def demonstration(self) -> Mode:
    """The mode whose scripted oracles demonstrate this one: single_agent for the single
    agent; mgrpo (M and S demonstrated separately) for every multi-agent mode."""
    return parse_mode("single_agent" if self.single else "mgrpo")

  @property
  def rollouts(self) -> str:
    """The name of the mode whose rollouts this one's are: "mgrpo" for every decoupled
    mode (M and S, each its own weights, roll out alike; they differ only in what RL
    trains), else this mode's own. Two modes with the same `rollouts` evaluate the same
    parameters identically."""
    return "mgrpo" if self.decoupled else self.name

  def check_agent(self, role: str) -> str:
    """`role` if it has its own weights in this mode; else a ValueError naming both."""
    if role not in self.agents:
      raise ValueError(f"experiment.mode={self.name!r} trains {self.agents}, not {role!r}")
    return role


_TABLE = {
    "mgrpo": Mode("mgrpo", ("main", "sub"), sub_agent=True, decoupled=True,
                  sub_trained=True, aligned=True),
    "frozen_sub": Mode("frozen_sub", ("main", "sub"), sub_agent=True, decoupled=True,
                       sub_trained=False, aligned=True),
    "no_alignment": Mode("no_alignment", ("main", "sub"), sub_agent=True, decoupled=True,
                         sub_trained=True, aligned=False),
    "unsynchronized": Mode("unsynchronized", ("main", "sub"), sub_agent=True, decoupled=True,
                           sub_trained=True, aligned=False, queued=True),
    "shared_policy": Mode("shared_policy", ("main",), sub_agent=True, decoupled=False,
                          sub_trained=False, aligned=True),
    "single_agent": Mode("single_agent", ("main",), sub_agent=False, decoupled=False,
                         sub_trained=False, aligned=True),
}


def parse_mode(mode: str | Mode) -> Mode:
  """The `Mode` named `mode` (a `Mode` is returned as is); else a ValueError naming it."""
  if isinstance(mode, Mode):
    return mode
  if mode not in _TABLE:
    raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
  return _TABLE[mode]
