"""One story from every reader, on a generated matrix of store states (issue 46's acceptance).

Each state (tests/store/story_farm.py: one release's objects present, missing, damaged or swapped; its attestations
present, missing or by an untrusted key; the views run on this machine before the change or not; a reader with or
without trusted keys) is read as a user would, twice in a row on the same machine: ``status --json``,
``plan --fleet`` (the same fleet) ``--json``, ``farm run --dry-run --json``, ``gc --json`` (a dry run), ``pull`` and
``triton`` of the release. The answers must agree: no traceback; exit codes from the README's table (0, or 1 for a
damaged store object; pull and triton 2 where status says nothing is released); ``status`` never calls released and
signed what ``pull`` refuses, and never says ``signed`` to a reader without trusted keys; a damaged object is named
and never hides the other model's rows; ``plan --fleet`` and ``--dry-run`` keep what ``status`` calls released;
``triton`` refuses what ``pull`` refuses; ``gc`` never deletes what a pointer names, and keeps every plan of the
release only where ``status`` calls it damaged or refused; the second run answers as the first (no local cache
changes an answer). A damaged signature or provenance is excused from naming without trusted keys (nothing looks at
it, ``pull`` included) and where status refuses the release in ``pull``'s words (what pull refuses first may hide a
later damage).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from trtfarm import layout
from trtfarm.errors import TrtfarmError
from trtfarm.publishing.release_check import read_pointer
from trtfarm.store import open_store

from ..clirunner import invoke
from .story_farm import GPU, OTHER_TARGET, TARGET, TOOLCHAIN, State, StoryFarm, all_states, sampled_states

ENV = {"COLUMNS": "200", "TRTFARM_TRUSTED_KEYS": None, "TRTFARM_SIGNING_KEY": None, "TRTFARM_TARGETS": None,
       "TRTFARM_RELEASE_MAX_AGE": None}
READERS = ("status", "plan", "dry-run", "gc", "pull", "triton")
MINE = f"enc/{GPU}/{TOOLCHAIN}"  # the release under test, as gc names what it keeps whole
KEPT_WHOLE = re.compile(r"gc keeps every plan of (\S+)\.$")
# The product: 2 readers x 3 attestations x 2 caches x 42 object states (the pointer swapped for another model's,
# another target's or the candidate channel's), less the bundle's 12 where unattested took it away: 480 states.
# SAMPLE of them run (every object state of the trusting reader with the workers' signatures, and a fixed sample of
# the rest); TRTFARM_STORY_ALL=1 runs them all.
SAMPLE = 200
STATES = all_states() if os.environ.get("TRTFARM_STORY_ALL") else sampled_states(SAMPLE)
KIND = {"pointer": "release pointer", "manifest": "manifest", "plan": "model.plan", "bundle": "signature",
        "provenance": "provenance", "export": "export record", "outcomes": "outcomes"}  # how a reason may name one
CODES = {0, 1}  # README: 0 on success, 1 on a failure or a mismatch (a damaged store object); 2 is bad input


@dataclass(frozen=True)
class Answer:
    code: int
    out: str
    err: str
    crash: str | None  # the exception that escaped the command: a traceback for a user

    def line(self) -> str:
        return " | ".join(x.strip() for x in self.err.splitlines() if x.strip())[:300]


def _invoke(args: list[str], env: dict | None = None) -> Answer:
    result = invoke(args, env={**ENV, **(env or {})})
    crash = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        crash = repr(result.exception)
    elif "Traceback (most recent call last)" in result.output:
        crash = "a traceback printed"
    return Answer(result.exit_code, result.stdout, result.stderr, crash)


def read_all(store: str, fleet: Path, work: Path) -> dict[str, Answer]:
    """Every reader's answer about the state, as a user on this machine gets it (``work``: where pull and triton
    write)."""
    where = ["--store", store, "--targets-file", str(fleet)]
    return {
        **read_views(store, fleet),
        "pull": _invoke(["pull", "enc", "--gpu", GPU, "--toolchain", TOOLCHAIN, "--to", str(work / "host/enc.plan"),
                         *where], {"TRTFARM_RELEASE_STATE": str(work / "accepted.json")}),
        "triton": _invoke(["triton", "enc", "--repo", str(work / "repo"), "--gpu", GPU, *where]),
    }


def read_views(store: str, fleet: Path) -> dict[str, Answer]:
    """The fleet views' answers (the readers with a cache on this machine)."""
    where = ["--store", store, "--targets-file", str(fleet)]
    return {"status": _invoke(["status", "--json", *where]),
            "plan": _invoke(["whatif", "--fleet", str(fleet), "--json", *where]),
            "dry-run": _invoke(["farm", "run", "--dry-run", "--json", *where]),
            "gc": _invoke(["gc", "--json", "--keep", "1", *where])}


def _json(answer: Answer) -> list[dict] | None:
    try:
        doc = json.loads(answer.out)
    except ValueError:
        return None
    return doc if isinstance(doc, list) and all(isinstance(d, dict) for d in doc) else None


def _cells(answer: Answer) -> dict[tuple[str, str], dict]:
    return {(c.get("model"), c.get("target")): c for c in _json(answer) or []}


def _rows(cells: dict, model: str) -> dict:
    return {k: {**c, "age_s": None} for k, c in cells.items() if k[0] == model}


def _leaf(key: str) -> str:
    return key.rsplit("/", 1)[-1]


# --- the rules of one story ------------------------------------------------------------------------------------------
def named_by_pointers(store: str) -> set[str]:
    """The manifests the store's channel pointers name (those that can be read)."""
    s, named = open_store(store), set()
    for key in [*s.list(layout.releases_prefix()), *s.list(layout.channel_prefix("candidate"))]:
        try:
            pointer, _ = read_pointer(s, key)
        except TrtfarmError:
            continue
        named |= {pointer.manifest} if pointer else set()
    return named


def _gc_rules(answer: Answer, mine: dict, named: set[str]) -> list[str]:
    """gc deletes nothing a pointer names, and keeps a release's plans whole only where status flags it."""
    try:
        doc = json.loads(answer.out)
        doomed = {p["manifest_key"] for p in doc["plans"]}
        whole = {m.group(1) for line in doc["skipped"] if (m := KEPT_WHOLE.search(line))}
    except (ValueError, KeyError, TypeError):
        return [f"gc: no answer, exit {answer.code}: {answer.line()}"]
    out = [f"gc deletes what a pointer names: {sorted(doomed & named)}"] if doomed & named else []
    if whole - {MINE}:
        out.append(f"gc keeps whole what nothing changed: {sorted(whole - {MINE})}")
    flagged = mine.get("state") in ("damaged", "refused") or (mine.get("candidate") or {}).get("verdict") == "damaged"
    if MINE in whole and not flagged:
        out.append(f"gc keeps every plan of {MINE} whole, but status says {mine.get('state')}")
    return out


def disagreements(state: State, answers: dict[str, Answer], farm: StoryFarm, others: dict,
                  named: set[str] | None = None) -> list[str]:
    """What the readers get wrong about ``state``, each as ``cause: what was said`` (``named``: what the store's
    pointers name)."""
    out = [f"traceback: {r}: {a.crash}" for r, a in answers.items() if a.crash]
    status, pull, triton = answers["status"], answers["pull"], answers["triton"]
    cells = _cells(status)
    mine = cells.get(("enc", TARGET), {})
    nothing = {2} if mine.get("state") in ("missing", "pending") else set()  # pull, triton: nothing released
    out += [f"exit code: {r} exit {a.code}: {a.line()}" for r, a in answers.items()
            if a.code not in CODES | (nothing if r in ("pull", "triton") else set())]
    if _rows(cells, "mlp") != others[state.reader]:
        out.append(f"hidden rows: status exit {status.code} lost or changed mlp's rows: {status.line()}")
    if mine.get("state") == "released" and mine.get("signed") == "signed" and pull.code != 0:
        out.append(f"released+signed but pull refuses: {pull.line()}")
    if state.reader == "plain" and any(c.get("signed") == "signed" for c in cells.values()):
        out.append("signed without trusted keys: status says signed to a reader that trusts no key")
    if pull.code != 0 and triton.code == 0:
        out.append(f"triton writes what pull refuses: {pull.line()}")
    signatures = state.obj in ("bundle", "provenance")
    if signatures and state.reader == "plain" and (mine.get("state") == "released") != (pull.code == 0):
        out.append(f"signatures: without trusted keys status says {mine.get('state')}, pull exits {pull.code}")
    # a damaged signature is no one's business without trusted keys (pull does not look), and with them a refusal
    # in pull's own words is the story (the first thing pull refuses for may hide a later damage)
    excused = signatures and (state.reader == "plain" or (mine.get("state") == "refused" and pull.code == 1))
    if state.damaged and not excused:
        told = status.err + " ".join(str(c.get("reason")) for k, c in cells.items() if k[0] == "enc")
        key = farm.keys[state.obj]
        if not any(name in told for name in (key, _leaf(key), KIND[state.obj])):
            out.append(f"damage not named: status says {mine.get('state')} ({mine.get('reason')}) "
                       f"of {state.obj} {_leaf(key)}")
    out += _gc_rules(answers["gc"], mine, named or set())
    for view in ("plan", "dry-run"):
        action = {(d.get("model"), d.get("target")): d.get("action") for d in _json(answers[view]) or []}
        if any(action.get(("mlp", t)) != "keep" for t in (TARGET, OTHER_TARGET)):
            out.append(f"hidden rows: {view} exit {answers[view].code} lost mlp's rows: {answers[view].line()}")
        if mine.get("state") == "released" and action.get(("enc", TARGET)) not in (None, "keep"):
            out.append(f"released but {view} says {action.get(('enc', TARGET))}")
    return out


def _said(answers: dict[str, Answer], work: Path) -> dict[str, tuple]:
    """What each reader said, without what may differ between two runs (ages, the run's own folder)."""
    out = {}
    for reader, a in answers.items():
        doc = _json(a) if reader == "status" else None
        text = json.dumps([{**c, "age_s": None} for c in doc]) if doc is not None else a.out
        out[reader] = (a.code, text.replace(str(work), "WORK"), a.err.replace(str(work), "WORK"))
    return out


def second_run_changes(first: dict, second: dict) -> list[str]:
    return [f"second run differs: {r} {first[r][0]} -> {second[r][0]}: {second[r][2].strip()[:200]!r} "
            f"(first: {first[r][2].strip()[:200]!r})" for r in READERS if first[r] != second[r]]


def _case(state: State):
    return pytest.param(state, id=state.id)


@pytest.fixture(scope="module")
def farm(tmp_path_factory) -> StoryFarm:
    return StoryFarm(tmp_path_factory.mktemp("one-story") / "farm")


@pytest.fixture(scope="module")
def others(farm, tmp_path_factory) -> dict:
    """mlp's rows as ``status`` gives them on the untouched farm, by reader: no state of enc may change them."""
    out = {}
    for reader in ("trusted", "plain"):
        root = tmp_path_factory.mktemp(f"pristine-{reader}")
        store, fleet = farm.copy(State(reader, "attested", "cold", "release", "intact"), root / "farm")
        cells = _cells(_invoke(["status", "--json", "--store", store, "--targets-file", str(fleet)]))
        out[reader] = _rows(cells, "mlp")
        assert len(out[reader]) == 2 and all(c["state"] == "released" for c in out[reader].values()), cells
    return out


@pytest.mark.parametrize("state", [_case(s) for s in STATES])
def test_every_reader_tells_one_story(farm, others, state, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))  # this machine's caches: this case's own
    (tmp_path / "tmp").mkdir()
    store, fleet = farm.copy(state, tmp_path / "farm")
    if state.cache == "warm":
        read_views(store, fleet)
    farm.change(state, tmp_path / "farm")
    first = read_all(store, fleet, tmp_path / "run1")
    second = read_all(store, fleet, tmp_path / "run2")
    wrong = disagreements(state, first, farm, others, named_by_pointers(store))
    wrong += second_run_changes(_said(first, tmp_path / "run1"), _said(second, tmp_path / "run2"))
    assert not wrong, f"{state.id}:\n  " + "\n  ".join(wrong)


def test_the_untouched_farm_is_released_and_signed_for_a_trusting_reader(farm, tmp_path, monkeypatch):
    """The referee: with no object changed, every reader accepts enc on the RTX 4090."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    store, fleet = farm.copy(State("trusted", "attested", "cold", "release", "intact"), tmp_path / "farm")
    answers = read_all(store, fleet, tmp_path / "run")
    assert all(a.code == 0 for a in answers.values()), {r: a.line() for r, a in answers.items()}
    mine = _cells(answers["status"])["enc", TARGET]
    assert (mine["state"], mine["signed"]) == ("released", "signed"), mine
    assert "signed by trusted key" in answers["pull"].out and (tmp_path / "run/repo/enc/config.pbtxt").is_file()
