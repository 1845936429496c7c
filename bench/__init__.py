"""Benchmarks (`make bench`): figures with ratios against baselines measured in the same run."""
