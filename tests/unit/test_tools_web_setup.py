"""`tools.backend` picks the registry every agent's calls run through: the web tools for
`web` (the warm start's `offline=True` keeps the index), the index otherwise."""

from __future__ import annotations

import dataclasses

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.tools.search import build_index
from mgrpo_jax.tools.web import WebToolRegistry, web_scalars
from mgrpo_jax.training import agent_setup


@dataclasses.dataclass
class _Page:
  page_id: int
  title: str
  text: str


def test_the_backend_picks_the_tools(tmp_path):
  index = tmp_path / "index.sqlite"
  build_index([_Page(0, "Varn", "The lighthouse of Varn.")], index)
  config = base_config()
  apply_overrides(config, {"tools.backend": "web", "tools.search_top_n": 2,
                           "tools.web.search_url": "http://127.0.0.1:9",
                           "tools.web.cache_dir": str(tmp_path / "cache"),
                           "tools.web.replay_only": True})
  web = agent_setup.index_tool_registry(index, config)
  assert isinstance(web, WebToolRegistry)
  assert web.names[:3] == ["search", "visit", "reason"]
  missed = web.call("search", {"query": "varn"})
  assert missed.text.startswith("error: search: replay_miss: no recorded answer to GET "
                                "http://127.0.0.1:9/search?q=varn&format=json")
  assert web_scalars(web)["tools/web/failures/replay_miss"] == 1.0
  offline = agent_setup.index_tool_registry(index, config, offline=True)
  assert not isinstance(offline, WebToolRegistry) and web_scalars(offline) == {}
  assert offline.call("search", {"query": "varn"}).text.startswith("1. Varn (page 0): ")
  apply_overrides(config, {"tools.backend": "offline"})
  assert agent_setup.index_tool_registry(index, config).call("visit", {"page": 0}).text == (
      "The lighthouse of Varn.")
