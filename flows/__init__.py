"""Prefect flows: orchestration only. One file per deployment; file, function and deployment share a name."""
