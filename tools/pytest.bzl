"""A py_test that runs pytest on its sources."""

def py_pytest_test(name, srcs, deps = [], data = [], args = [], **kwargs):
    """One pytest file (or several) as a Bazel py_test.

    Args:
      name: target name.
      srcs: the test files.
      deps: py_library dependencies.
      data: runtime files (conftest.py files must be listed here).
      args: extra pytest arguments.
      **kwargs: passed to py_test (size, tags, ...).
    """
    native.py_test(
        name = name,
        srcs = srcs + ["//tools:pytest_main.py"],
        main = "//tools:pytest_main.py",
        args = ["$(location %s)" % f for f in srcs] + args,
        deps = deps,
        data = data,
        python_version = "PY3",
        **kwargs
    )
