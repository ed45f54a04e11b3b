"""Typed errors. Each carries a message a user can act on.

The CLI prints ``microrag: error: <message>`` and exits non-zero; the server (later)
turns them into a 4xx JSON body. Nothing here formats tracebacks.
"""


class MicroRAGError(Exception):
    """Base class: a mistake or condition the user can fix."""

    exit_code = 2


class ConfigError(MicroRAGError):
    """A setting, flag or preset name is invalid."""


class CorpusError(MicroRAGError):
    """The corpus path is missing, empty, or holds nothing we can read."""


class ModelMissingError(MicroRAGError):
    """An optional model package is not installed."""


class LLMError(MicroRAGError):
    """The LLM endpoint failed, refused us, or answered garbage."""

    exit_code = 3
