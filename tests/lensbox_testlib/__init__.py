"""Shared helpers for lensbox's Python test suites; each helper lives in its own module (add yours beside them)."""
