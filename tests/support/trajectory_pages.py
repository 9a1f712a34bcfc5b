"""Hand-made trajectory page data: two questions, M delegating to S, hostile text."""

from __future__ import annotations

from mgrpo_jax.metrics import trajectory_page as page

# Text from a trajectory that a page must show, never run.
HOSTILE = '<script>document.title="pwned"</script><b>bold?</b> & "quoted"'


def sub_call(index: int, subtask: str, final: str | None = "1912") -> page.SubCall:
  """S's call `index`: one search, its observation and a result."""
  return page.SubCall(index, subtask, (
      page.Message("system", "You are the research sub-agent."),
      page.Message("task", subtask),
      page.Message("assistant", '<tool_call>{"name": "search"}</tool_call>',
                   tool='search {"query": "Ada"}'),
      page.Message("observation", "<tool_response>Ada ... born 1912</tool_response>"),
      page.Message("assistant", f"<result>{final}</result>"),
  ), final, True, reward=0.5)


def rollout(index: int, correct: bool, delegations: int, final: str = "1912"
            ) -> page.Rollout:
  """M's rollout: `delegations` delegating turns (each with its S call), then a result."""
  messages = [page.Message("system", "You are the planner."),
              page.Message("task", "When was Ada born?")]
  for i in range(delegations):
    messages.append(page.Message("assistant", "<tool_call>delegate</tool_call>",
                                 tool='delegate {"subtask": "birth year of Ada"}',
                                 sub_call=sub_call(i, f"birth year of Ada, try {i}")))
    messages.append(page.Message("observation", "<tool_response>1912</tool_response>"))
  messages.append(page.Message("assistant", f"<result>{final}</result>"))
  return page.Rollout(index, tuple(messages), final, correct, True, "result",
                      reward=1.0 if correct else 0.1)


def questions() -> list[page.Question]:
  """Question q0: 3 rollouts (2 correct, 1, 2 and 0 S calls); q1: 2 rollouts, one with
  `HOSTILE` as its answer."""
  return [
      page.Question("q0", "When was Ada born?", "1912", "lookup",
                    (rollout(0, True, 1), rollout(1, True, 2), rollout(2, False, 0, "1900"))),
      page.Question("q1", "Who <b>wrote</b> it?", "Bo", "multihop",
                    (rollout(0, False, 1, HOSTILE), rollout(1, True, 1, "Bo"))),
  ]
