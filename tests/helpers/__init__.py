"""Helpers shared by several test modules (no test module imports another; see tests/project/test_layout.py)."""
