"""Helpers shared by the tests, imported as a package: `from tests.support import trees`."""
