"""``python -m trtfarm``."""

from trtfarm.cli.main import main

main()
