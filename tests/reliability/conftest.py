"""Reliability tests: the real daemon, the real local model server (see tests/e2e)."""

from tests.e2e.conftest import model_server, workspace

__all__ = ["model_server", "workspace"]
