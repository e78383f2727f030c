"""Benchmarks: each prints its figures as ratios against a baseline measured in the same run and
writes a machine-readable JSON result."""
