# The two commands a newcomer needs: `make demo` and `make test`.
# Both create .venv if missing and install the package with its dev extras.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# glibc malloc on transparent huge pages for the test processes too (the launcher sets it
# for itself: mgrpo_jax/utils/host_memory.py); a value set by the caller is kept.
export GLIBC_TUNABLES ?= glibc.malloc.hugetlb=1

.PHONY: demo test test-unit bazel-test lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: venv
	$(PY) launch/tpu_run.py --slice=all --config=configs/local_demo.py

# The tests' persistent XLA compilation cache: every program the tests compile (in
# pytest, in the runs they launch, and in `bazel-test` after them) is compiled once and
# loaded after, here and in later runs. A loaded program is the compiled program itself,
# so results are bitwise those of a cold compile. The size cap makes JAX lock the folder,
# so concurrent workers never read a half-written entry. A value set by the caller is kept.
JAX_TEST_CACHE ?= $(CURDIR)/.cache/jax_tests
JAX_TEST_ENV := JAX_COMPILATION_CACHE_DIR=$(JAX_TEST_CACHE) \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_COMPILATION_CACHE_MAX_SIZE=4000000000

# `make test` runs every test once: the integration tests under pytest, then the unit
# tests under Bazel where it is installed (one sandboxed target per package: a test that
# leans on something its target does not declare fails there), else under pytest; it
# fails if either part fails. One pytest worker per core (pytest-xdist); each test file
# runs on one worker, so its module fixtures (warm starts, worlds, emulators) are built
# once. Files are handed out in collection order, the longest first (xdist's default
# hands out the files with the most tests first, which left a two-minute training test
# for the end). --durations lists the slowest tests (docs/BENCHMARKS.md, "Test time").
PYTEST := env $(JAX_TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -n auto --dist loadfile \
	--no-loadscope-reorder --durations=20

test: venv
	rc=0; $(PYTEST) tests/integration || rc=$$?; \
	if command -v bazel >/dev/null 2>&1; then $(MAKE) --no-print-directory bazel-test || rc=$$?; \
	else $(PYTEST) tests/unit || rc=$$?; fi; exit $$rc

test-unit: venv
	$(PYTEST) tests/unit

bazel-test: venv
	mkdir -p $(JAX_TEST_CACHE)
	bazel test //tests:unit $(foreach v,$(JAX_TEST_ENV),--test_env=$(v)) \
		--sandbox_writable_path=$(JAX_TEST_CACHE)

lint: venv
	$(PY) -m ruff check mgrpo_jax tests launch configs benchmarks tools

clean:
	rm -rf $(VENV) runs bazel-*
