"""Benchmarks: running them and reading their output (``fabtune.perf.parsers``)."""
