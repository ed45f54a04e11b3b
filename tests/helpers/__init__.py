"""Test helpers shared by several test modules: a scripted model, a running server, tiny
cross-encoders, free ports. Fixtures, paths and the CLI runner are in conftest.py."""
