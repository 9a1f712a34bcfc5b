"""The `tools` group's start-up rules: every error names its key."""

from __future__ import annotations

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, base_config, check_environment, validate

_WEB = {"tools.backend": "web", "tools.web.search_url": "http://localhost:8888"}


@pytest.mark.parametrize("overrides, message", [
    ({"tools.backend": "web"},
     r"'tools\.web\.search_url': tools\.backend='web' searches through it"),
    ({**_WEB, "tools.web.search_url": "localhost:8888"},
     r"'tools\.web\.search_url': expected an http\(s\) URL with a host, got 'localhost:8888'"),
    ({"tools.web.search_url": "http://[::1"}, r"'tools\.web\.search_url': expected an http"),
    ({**_WEB, "tools.web.search_params": "language=en&count"},
     r"'tools\.web\.search_params': expected URL-encoded parameters"),
    ({**_WEB, "tools.web.replay_only": True},
     r"'tools\.web\.replay_only': replays the answers recorded in tools\.web\.cache_dir"),
    ({**_WEB, "world.train_worlds": 3},
     r"'tools\.backend': 'web' is one world: world\.train_worlds must be 1, got 3"),
    ({"tools.backend": "cloud"}, r"'tools\.backend': expected one of 'offline', 'web'"),
    ({"tools.web.search_kind": "bing"}, r"'tools\.web\.search_kind': expected one of"),
    ({"tools.web.results_field": ""}, r"'tools\.web\.results_field': expected a str "
                                      r"\(not empty\)"),
    ({"tools.web.timeout_s": 0.0}, r"'tools\.web\.timeout_s': expected a float >= 0\.01"),
    ({"tools.web.max_bytes": 10}, r"'tools\.web\.max_bytes': expected a int >= 1024"),
    ({"tools.web.retries": 11}, r"'tools\.web\.retries': expected a int in \[0, 10\]"),
    ({"tools.web.min_host_interval_s": -1.0},
     r"'tools\.web\.min_host_interval_s': expected a float >= 0\.0"),
])
def test_bad_tools_settings_name_their_key(overrides, message):
  config = base_config()
  apply_overrides(config, overrides)
  with pytest.raises(ConfigError, match=message):
    validate(config)


def test_good_web_settings_pass():
  config = base_config()
  apply_overrides(config, {**_WEB, "tools.web.search_params": "language=en&count=10",
                           "tools.web.cache_dir": "web_cache", "tools.web.replay_only": True})
  validate(config)
  apply_overrides(config, {"tools.backend": "offline", "tools.web.search_url": ""})
  validate(config)


def test_the_api_key_variable_must_be_set_for_live_web_runs(monkeypatch):
  config = base_config()
  apply_overrides(config, {**_WEB, "tools.web.api_key_env": "MGRPO_TEST_SEARCH_KEY"})
  monkeypatch.delenv("MGRPO_TEST_SEARCH_KEY", raising=False)
  with pytest.raises(ConfigError, match=r"'tools\.web\.api_key_env': names the environment "
                                        r"variable 'MGRPO_TEST_SEARCH_KEY', which is unset"):
    check_environment(config)
  apply_overrides(config, {"tools.web.replay_only": True, "tools.web.cache_dir": "c"})
  check_environment(config)  # a replay sends no request, so needs no key
  apply_overrides(config, {"tools.web.replay_only": False})
  monkeypatch.setenv("MGRPO_TEST_SEARCH_KEY", "k")
  check_environment(config)
