"""Helpers shared by tests, the demo and the benchmarks: the local model server."""
