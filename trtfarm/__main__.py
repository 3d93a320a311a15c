"""``python -m trtfarm``."""

from trtfarm.cli import main

main()
