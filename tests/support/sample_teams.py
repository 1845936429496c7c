"""Team matches for the tests: the sample leagues' generator (stream_app.offline.sample),
which the demo's team leagues use too."""

from stream_app.offline.sample import team_league

__all__ = ["team_league"]
