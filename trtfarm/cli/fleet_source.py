"""Which fleet a view reads: the fleet file given or found here, else the one the store recorded, else this machine's.

A view (``status``, ``pull``, ``plans``, the channel commands) shows the store's story, so on a host without a fleet
file it reads the fleet the store's runs recorded (``state/fleet_record.py``), not the host's own GPUs; it
says so in one line on stderr. ``--targets-file``, ``$TRTFARM_TARGETS`` and ``./gpu_targets.yaml`` still win.
"""

from __future__ import annotations

from pathlib import Path

from trtfarm.cli.common import err, message_text, targets_path
from trtfarm.vocabulary.fleet import Fleet


def view_fleet(targets_file: Path | None, store, *, note: bool = True) -> tuple[str, Fleet]:
    """``(path, fleet)``: the fleet file's path (``BUILTIN_FLEET`` when none) and the fleet the view reads."""
    from trtfarm.project.fleet_file import BUILTIN_FLEET, default_targets_file, load_fleet
    from trtfarm.state.fleet_record import recorded_fleet

    if targets_file is None and default_targets_file() == BUILTIN_FLEET:
        recorded = recorded_fleet(store)
        if recorded is not None:
            if note:
                err.print(message_text(recorded.note()), highlight=False, soft_wrap=not err.is_terminal)
            return BUILTIN_FLEET, recorded.fleet
    path = targets_path(targets_file, note=note)
    return path, load_fleet(path)
