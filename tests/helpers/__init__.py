"""Test helpers shared by several test modules (fixtures live in conftest.py)."""
