"""Benchmarks: running them and reading their output (``fabtune.bench.parsers``)."""
