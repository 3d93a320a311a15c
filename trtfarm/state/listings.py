"""The store's listings a survey is made from: listed side by side, and each read into per-model maps.

On a store whose listing is a sequence of pages (S3), the long listings are listed in parts split at model prefixes,
side by side (``listed_in_parts``); each object is listed once. Each listing is then read into what the survey
answers from, one parse of each key: the registered exports, the state records, the plan folders by model, the
load receipts of models with a candidate, the stored run outcomes. ``survey.py`` decides what to list and reads
the objects' contents; nothing here reads an object.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice

from trtfarm import layout
from trtfarm.store import Store
from trtfarm.store.base import ListedObject

READ_THREADS = 16  # objects read at once (their requests overlap; the store client is shared)
LIST_PARTS, FIRST_PAGE = 8, 1000  # a paged store's long listing: in at most 8 parts after its first page (S3's)


@dataclass(frozen=True)
class Folder:
    """One plan folder the listing shows: its prefix and the fields of its key."""

    prefix: str
    model: str
    onnx12: str
    gpu: str
    toolchain: str
    build12: str


def exports_of(listed: list[ListedObject]) -> dict[str, list[tuple[str, ListedObject]]]:
    """``model -> [(export id, its export.json)]`` of a listing of ``models/``, by export id."""
    found: dict[str, list[tuple[str, ListedObject]]] = {}
    for obj in listed:
        parsed = layout.parse_export_record_key(obj.key)
        if parsed:
            found.setdefault(parsed[0], []).append((parsed[1], obj))
    return {m: sorted(v, key=lambda e: e[0]) for m, v in found.items()}


def states_of(listed: Iterable[ListedObject]) -> dict[str, ListedObject]:
    """``model -> its state record`` of a listing of ``state/``."""
    return {name: o for o in listed if (name := layout.parse_state_key(o.key))}


def listed_in_parts(store: Store, prefixes: list[str]) -> tuple[dict[str, ListedObject], list[list[ListedObject]]]:
    """The state records' listing, and each prefix's, the long ones in parts split at model prefixes, side by side.

    On a store whose listing is a sequence of pages (S3), a listing of 40,000 keys is 40 requests one after another.
    First, side by side, the state records' listing (whose models name the splits) and each prefix's first page
    (``FIRST_PAGE`` objects); a prefix with more is listed on from its page's last key in parts (``splits``),
    all side by side. A part ends after a model's prefix (``a < key <= b``): each object is listed once, whatever
    its model's name.
    """
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(prefixes) + 1)) as pool:
        listed = pool.submit(lambda: states_of(store.list_versions(layout.state_prefix())))
        firsts = list(pool.map(lambda p: list(islice(store.list_versions(p), FIRST_PAGE)), prefixes))
        models = sorted(listed.result())
        parts = []
        for prefix, first in zip(prefixes, firsts, strict=True):
            if len(first) == FIRST_PAGE:
                bounds = [first[-1].key, *splits(prefix, first[-1].key, models)]
                parts += [(prefix, a, b) for a, b in zip(bounds, [*bounds[1:], None], strict=True)]
        rest = list(pool.map(lambda part: list(store.list_versions_between(*part)), parts))
    for (prefix, _, _), objects in zip(parts, rest, strict=True):
        firsts[prefixes.index(prefix)].extend(objects)
    return listed.result(), firsts


def splits(prefix: str, last: str, models: list[str]) -> list[str]:
    """Where to split the rest of a listing after ``last``: in at most ``LIST_PARTS`` parts, each under whole pages.

    The keys per model are guessed from the first page (``FIRST_PAGE`` keys held the models up to ``last``'s), so
    that a part's last page reads few keys of the next part (a part's end is known only once a key passes it).
    """
    after = [prefix + m for m in models if prefix + m > last]
    per_model = FIRST_PAGE / max(1, len(models) - len(after))
    pages = -(-int(len(after) * per_model) // FIRST_PAGE)
    if pages < 2:
        return []
    each = max(int(-(-pages // LIST_PARTS) * FIRST_PAGE * 0.9 / per_model),  # models a part: 10% under its pages,
               -(-len(after) // LIST_PARTS))  # unless that would take more parts
    return after[each::each]


def listed_one(store: Store, key: str) -> ListedObject | None:
    """One object as a listing shows it (a listing of its own key), or None."""
    return next((o for o in store.list_versions(key) if o.key == key), None)


def grouped_by_model(listed: list[ListedObject], at: int) -> dict[str, list[ListedObject]]:
    """The objects of a listing by the model their key names (its ``at``-th segment)."""
    out: dict[str, list[ListedObject]] = {}
    for obj in listed:
        parts = obj.key.split("/")
        if len(parts) > at + 1:
            out.setdefault(parts[at], []).append(obj)
    return out


def plan_folders(listed: list[ListedObject]) -> tuple[dict[str, dict[str, ListedObject]], dict[str, list[Folder]]]:
    """``plan folder -> {file name: object}`` of the objects under ``plans/`` whose key has a plan folder's shape.

    And ``model -> its plan folders`` (``StoreSurvey.by_model``), both in listing order, from one parse of each key.
    """
    folders: dict[str, dict[str, ListedObject]] = {}
    by_model: dict[str, list[Folder]] = {}
    objects: dict[str, ListedObject] = {}
    last = None  # the folder of the object before (a listing gives a folder's objects one after the other)
    for obj in listed:
        prefix, _, leaf = obj.key.rpartition("/")
        if prefix != last:
            parsed = layout.parse_plan_key(obj.key)
            if parsed is None:
                continue
            last, objects = prefix, folders.get(prefix)
            if objects is None:
                objects = folders[prefix] = {}
                by_model.setdefault(parsed.model, []).append(Folder(prefix, *parsed[:5]))
        objects[leaf] = obj
    return folders, by_model


def receipts_of(store: Store, model: str | None, candidates: dict[str, ListedObject]) -> dict[str, list[ListedObject]]:
    """The load receipts of each model with a candidate pointer listed (its promotion gates count them)."""
    if not candidates:
        return {}
    found = grouped_by_model(list(store.list_versions(layout.receipts_prefix(model))), 1)
    promoted = {k.split("/")[1] for k in candidates}
    return {m: objects for m, objects in found.items() if m in promoted}


def runs_of(listed: list[ListedObject]) -> dict[str, list[tuple[str, ListedObject]]]:
    """``model -> [(run, its outcomes.json)]``, newest first (by when the store wrote it)."""
    found: dict[str, list[tuple[str, ListedObject]]] = {}
    for obj in listed:
        parsed = layout.parse_report_key(obj.key)
        if parsed and parsed[2] == layout.OUTCOMES_NAME:
            found.setdefault(parsed[0], []).append((parsed[1], obj))
    return {m: sorted(v, key=lambda r: (r[1].modified, r[0]), reverse=True) for m, v in found.items()}
