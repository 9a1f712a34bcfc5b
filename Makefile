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

# One pytest worker per core (pytest-xdist); each test file runs on one worker, so its
# module fixtures (warm starts, worlds, emulators) are built once.
test: venv
	$(PY) -m pytest tests -q -p no:cacheprovider -n auto --dist loadfile

test-unit: venv
	$(PY) -m pytest tests/unit -q -p no:cacheprovider

bazel-test: venv
	bazel test //tests:unit

lint: venv
	$(PY) -m ruff check mgrpo_jax tests launch configs benchmarks tools

clean:
	rm -rf $(VENV) runs bazel-*
