"""Helpers and data shared by tests in several folders (not fixtures: those live in conftest.py)."""
