"""Requests side by side only where they wait on a network (``store.base.side_by_side``).

A file store on a local disk is listed and read in the view's own thread: threads there only pass the interpreter's
lock back and forth. S3 and a file store on a network file system (by the mount table) overlap their requests.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.store_requests import CountingStore
from trtfarm.state.record import RecordedState, write_state
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import open_store
from trtfarm.store.base import InPlace, side_by_side
from trtfarm.store.local import network_mount

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw 0 0
nas:/export /mnt nfs4 rw,vers=4.2 0 0
/dev/vdb /mnt/local ext4 rw 0 0
server:/share /srv/my\\040share cifs rw 0 0
me@host:/x /home/me/remote fuse.sshfs rw 0 0
nas:/t /srv/tab\\011and\\134slash nfs rw 0 0
lxcfs /var/lib/lxcfs fuse.lxcfs rw 0 0
fuse-overlayfs /home/me/.local/share/containers fuse.fuse-overlayfs rw 0 0
"""


@pytest.mark.parametrize(("path", "network"), [
    ("/tmp/store", False), ("/mnt/store", True), ("/mnt", True), ("/mnt/local/store", False),
    ("/mnt/localer", True), ("/srv/my share/store", True), ("/srv/my", False), ("/home/me/remote/s", True),
    ("/var/lib/lxcfs/x", False), ("/srv/tab\tand\\slash/s", True), ("/srv/tab", False),
    ("/home/me/.local/share/containers/x", False),
])
def test_the_mount_table_says_which_folders_are_on_a_network(tmp_path, path, network):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert network_mount(path, str(mounts)) is network


def test_no_mount_table_is_a_local_disk(tmp_path):
    assert network_mount("/mnt/store", str(tmp_path / "absent")) is False


class Recording(CountingStore):
    """A counting store that notes the thread of every listing and read."""

    def __init__(self, inner, waits: bool) -> None:
        super().__init__(inner, Counter())
        self.waits_on_network, self.threads = waits, set()

    def list_versions(self, prefix: str = ""):  # noqa: D102
        self.threads.add(threading.get_ident())
        return super().list_versions(prefix)

    def get(self, key: str):  # noqa: D102
        self.threads.add(threading.get_ident())
        return super().get(key)


@pytest.mark.parametrize("waits", [False, True])
def test_a_survey_overlaps_requests_only_where_they_wait(tmp_path, waits):
    inner = open_store((tmp_path / "store").as_uri())
    assert inner.waits_on_network is False  # pytest's folder is on a local disk here
    for i in range(40):
        write_state(inner, RecordedState(model=f"m{i:02d}", inputs="0" * 64, written_at="2026-12-04T00:00:00+00:00",
                                         by="test", expected={}, cells={}))
    store = Recording(inner, waits)
    survey = StoreSurvey(store, None)
    assert len(survey.recorded(survey.states)) == 40
    if waits:
        assert store.threads - {threading.get_ident()}  # read on the pool's threads
    else:
        assert store.threads == {threading.get_ident()}


def test_in_place_runs_each_call_in_turn_and_hands_back_errors():
    order = []

    def call(i):
        order.append((i, threading.get_ident()))
        if i == 3:
            raise ValueError("three")
        return i * i

    with side_by_side(open_store("/tmp/never-written"), 8) as pool:
        assert isinstance(pool, InPlace)
        assert list(pool.map(call, [0, 1, 2])) == [0, 1, 4]
        failed = pool.submit(call, 3)
    assert order == [(i, threading.get_ident()) for i in range(4)]
    with pytest.raises(ValueError, match="three"):
        failed.result()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_leaves_at_once_and_no_later_call_runs(stop):
    calls = []

    def call(i):
        calls.append(i)
        if i == 1:
            raise stop
        return i

    with pytest.raises(stop):
        list(InPlace().map(call, range(5)))
    assert calls == [0, 1]
