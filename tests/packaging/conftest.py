"""The packaging tests share the integration tests' private FABTUNE_HOME (one per pytest session)."""

from tests.integration.conftest import _fabtune_home

__all__ = ["_fabtune_home"]
