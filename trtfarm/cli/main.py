"""The ``trtfarm`` entry point: registers every command group on the app and runs it."""

from __future__ import annotations

from trtfarm.cli import build, farm, images, models, profiles, quality, store_ops, webhook  # noqa: F401 - register
from trtfarm.cli.common import app


def main() -> None:
    """Console entry point."""
    app()
