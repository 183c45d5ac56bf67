"""Benchmark adapters: each casts a benchmark into sources, tasks and splits, with its scorer."""
