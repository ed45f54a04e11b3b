"""Screening of documents before they go live: classifiers that read an upload at ingest and
say which parts of it look hostile (``screen.injection``: prompt injection and jailbreak text)."""
