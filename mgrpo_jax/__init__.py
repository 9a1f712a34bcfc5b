"""mgrpo_jax: train multi-agent LLM systems (a planner and a tool-using sub-agent) with M-GRPO."""

__version__ = "0.1.0"
