"""Pure parsers of real RDMA/GPU tool output into typed, frozen records.

Each module exposes ``parse(text) -> Record``; malformed or truncated input raises
:class:`fabtune.errors.ParseError` naming what was expected. Formats are described in
``../shared/formats.md``.
"""
