"""Counting the real ``open_store`` and ``load_fleet`` calls of a run: in this process, or in a farm's processes."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

FOLDER = Path(__file__).resolve().parent  # on PYTHONPATH, its sitecustomize counts in every process started


def count_calls(monkeypatch, *functions) -> Counter:
    """Wrap each real function wherever a loaded module binds it; the returned counter counts calls by name.

    A module imported later binds the wrapper too (its ``from ... import`` reads the patched origin module).
    """
    counts: Counter = Counter()
    for fn in functions:
        def counted(*args, _fn=fn, **kwargs):
            counts[_fn.__name__] += 1
            return _fn(*args, **kwargs)

        for module in list(sys.modules.values()):
            if getattr(module, fn.__name__, None) is fn:
                monkeypatch.setattr(module, fn.__name__, counted)
    return counts


def counted_in(folder: Path, process: str, store: str, fleet: str) -> tuple[Counter, str]:
    """What the sitecustomize counted in one process (a flow run's id): the opens of the run's store and the reads
    of its fleet file, and every counted line (for the failure message).

    Left out: Prefect building ``MatrixRequest``'s parameter schema, which reads the default fleet for the form's
    target ids (``planning/requests.py``: ``_known_target_ids``), and opens of a model's export folder.
    """
    path = folder / f"{process}.calls"
    lines = path.read_text().splitlines() if path.exists() else []
    counts: Counter = Counter()
    for line in lines:
        name, arg, callers = line.split("\t")
        if "_known_target_ids" not in callers and arg in (store, fleet):
            counts[name] += 1
    return counts, "\n".join(lines)
