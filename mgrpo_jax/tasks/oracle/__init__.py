"""Scripted oracle policies for M and S that solve world questions through the tools.

`OracleMainAgent` and `OracleSubAgent` are step-wise policies (history -> next action);
with `MainNoise` / `SubNoise` they make systematic mistakes for warm-start data.
`run_episode` is the sequential reference runner.
"""

from __future__ import annotations

from mgrpo_jax.tasks.oracle.actions import Action, MainPolicy, Step, SubPolicy
from mgrpo_jax.tasks.oracle.episode import Episode, SubCall, run_episode, run_sub
from mgrpo_jax.tasks.oracle.main_agent import UNKNOWN, OracleMainAgent
from mgrpo_jax.tasks.oracle.noise import MainNoise, SubNoise
from mgrpo_jax.tasks.oracle.sub_agent import OracleSubAgent

__all__ = ["UNKNOWN", "Action", "Episode", "MainNoise", "MainPolicy", "OracleMainAgent",
           "OracleSubAgent", "Step", "SubCall", "SubNoise", "SubPolicy", "run_episode",
           "run_sub"]
