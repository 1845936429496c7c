"""The stream worker: Faust app, batch loop, exactly-once commits, HTTP API, metrics."""
