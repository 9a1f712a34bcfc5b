"""Key and prefix validation shared by all store backends."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.store import InvalidKeyError
from mgrpo_jax.store import keys as keys_lib

# Independent reference of the documented key grammar.
_REFERENCE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")


@pytest.mark.parametrize("key", ["a", "runs/r-1/step_00000003/outcomes", "A.b_c-d/e.json",
                                 "_x/0", "a/b./c..d"])
def test_valid_keys_pass_unchanged(key: str) -> None:
  assert keys_lib.validate_key(key) == key
  assert keys_lib.is_valid_key(key)


@pytest.mark.parametrize("key, problem", [
    ("", "empty"), ("/a", "''"), ("a/", "''"), ("a//b", "''"), ("..", "'..'"),
    ("a/../b", "'..'"), ("./a", "'.'"), (".tmp-1", "'.tmp-1'"), ("a b", "'a b'"),
    ("a\\b", "invalid segment"), ("é", "invalid segment"), ("-a", "'-a'"),
    ("x" * 513, "longer than 512"),
])
def test_invalid_keys_name_key_and_problem(key: str, problem: str) -> None:
  with pytest.raises(InvalidKeyError, match=re.escape(problem)) as info:
    keys_lib.validate_key(key)
  assert repr(key[:40]) in str(info.value) or not key
  assert not keys_lib.is_valid_key(key)


def test_non_str_key_and_bytes_value_types() -> None:
  with pytest.raises(InvalidKeyError, match="must be a str"):
    keys_lib.validate_key(b"a")
  assert keys_lib.as_record_bytes("k", bytearray(b"ab")) == b"ab"
  assert keys_lib.as_record_bytes("k", memoryview(b"ab")) == b"ab"
  with pytest.raises(TypeError, match="'k'.*str"):
    keys_lib.as_record_bytes("k", "ab")


@pytest.mark.parametrize("prefix", ["", "a", "a/", "runs/r1/step_0", "a/b/"])
def test_valid_prefixes(prefix: str) -> None:
  assert keys_lib.validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "/a", "a//", "../", "a/./", ".x", None])
def test_invalid_prefixes(prefix: object) -> None:
  with pytest.raises(InvalidKeyError):
    keys_lib.validate_prefix(prefix)


@given(st.text(alphabet="ab._-/é \\", max_size=12))
def test_validation_matches_reference_grammar(key: str) -> None:
  expected = _REFERENCE.fullmatch(key) is not None
  assert keys_lib.is_valid_key(key) == expected
  if expected:
    assert keys_lib.validate_key(key) == key
  else:
    with pytest.raises(InvalidKeyError):
      keys_lib.validate_key(key)
