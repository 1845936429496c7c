"""Streaming rating processor."""
