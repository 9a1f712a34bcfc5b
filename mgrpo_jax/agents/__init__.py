"""Agents: the tools M and S call (`agents.tools`: search, visit, reason, a registry).

The action grammar, format validators, the lockstep controller and trajectory records
join this package later. `agents` imports nothing from training or models.
"""
