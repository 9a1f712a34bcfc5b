"""Small shared utilities with no dependency on the rest of the project."""
