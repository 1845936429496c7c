"""Offline: the same engine over files (replay, accuracy, charts) and the sample data."""
