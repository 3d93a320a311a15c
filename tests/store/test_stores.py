"""Both store backends, against real backends: a directory and moto's S3 server over HTTP."""

from __future__ import annotations

import os
import threading

import pytest

from trtfarm.errors import IntegrityError, StoreError
from trtfarm.identity import sha256_file
from trtfarm.store import AlreadyExists, Conflict, LocalStore, open_store
from trtfarm.store.s3 import S3Store


def test_put_if_absent_creates_once(store_uri):
    s = open_store(store_uri)
    assert s.put_if_absent("a/b.json", b"one")
    assert not s.put_if_absent("a/b.json", b"two")
    assert s.get("a/b.json").data == b"one"
    assert s.get("a/missing") is None


def test_compare_and_swap_refuses_a_stale_etag(store_uri):
    s = open_store(store_uri)
    first = s.compare_and_swap("p.json", b"v1", None)
    with pytest.raises(Conflict):
        s.compare_and_swap("p.json", b"v1b", None)
    second = s.compare_and_swap("p.json", b"v2", first)
    with pytest.raises(Conflict):
        s.compare_and_swap("p.json", b"v3", first)
    assert s.get("p.json").data == b"v2" and s.get("p.json").etag == second


def test_concurrent_compare_and_swap_loses_no_increment(store_uri):
    s = open_store(store_uri)
    s.compare_and_swap("n", b"0", None)

    def bump():
        for _ in range(10):
            while True:
                cur = s.get("n")
                try:
                    s.compare_and_swap("n", str(int(cur.data) + 1).encode(), cur.etag)
                    break
                except Conflict:
                    continue

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.get("n").data == b"40"


def test_streaming_upload_hashes_on_the_way_and_is_create_only(store_uri, tmp_path):
    s = open_store(store_uri)
    src = tmp_path / "plan.bin"
    src.write_bytes(os.urandom(3 << 20))
    seen = []
    up = s.upload_file("plans/x/model.plan", src, progress=seen.append)
    assert up.sha256 == sha256_file(src) and up.size == 3 << 20 and sum(seen) == 3 << 20
    with pytest.raises(AlreadyExists):
        s.upload_file("plans/x/model.plan", src)
    dest = tmp_path / "out" / "model.plan"
    assert s.download_file("plans/x/model.plan", dest, sha256=up.sha256) == 3 << 20
    assert sha256_file(dest) == up.sha256


def test_download_refuses_a_sha_mismatch_and_leaves_nothing(store_uri, tmp_path):
    s = open_store(store_uri)
    s.put_if_absent("k/model.plan", b"plan bytes")
    out = tmp_path / "downloads"
    out.mkdir()
    with pytest.raises(IntegrityError, match="does not match the manifest"):
        s.download_file("k/model.plan", out / "model.plan", sha256="0" * 64)
    assert list(out.iterdir()) == []


def test_list_yields_keys_under_a_prefix(store_uri):
    s = open_store(store_uri)
    for k in ("plans/a/1", "plans/a/2", "plans/b/1", "releases/a.json"):
        s.put_if_absent(k, b"x")
    assert list(s.list("plans/a/")) == ["plans/a/1", "plans/a/2"]
    assert sorted(s.list("plans/")) == ["plans/a/1", "plans/a/2", "plans/b/1"]
    s.delete("plans/a/1")
    assert list(s.list("plans/a/")) == ["plans/a/2"]


def test_a_listing_gives_each_objects_version_which_changes_when_it_is_rewritten(store_uri):
    s = open_store(store_uri)
    s.put_if_absent("releases/a.json", b"one")
    s.put_if_absent("releases/b.json", b"two")
    first = {o.key: o for o in s.list_versions("releases/")}
    assert sorted(first) == ["releases/a.json", "releases/b.json"]
    assert first["releases/a.json"].size == 3 and first["releases/a.json"].modified > 1.6e9
    etag = s.get("releases/a.json").etag
    s.compare_and_swap("releases/a.json", b"three", etag)
    again = {o.key: o for o in s.list_versions("releases/")}
    assert again["releases/a.json"].version != first["releases/a.json"].version
    assert again["releases/b.json"].version == first["releases/b.json"].version
    assert [(k, n) for k, n in s.list_sizes("releases/")] == [("releases/a.json", 5), ("releases/b.json", 3)]


@pytest.mark.parametrize("key", ["../escape", "/abs", "a/../../b", "a//b", ".tmp-x/y", "a\\b"])
def test_keys_that_could_escape_are_refused(store_uri, key):
    with pytest.raises(StoreError, match="invalid store key"):
        open_store(store_uri).put_if_absent(key, b"x")


def test_local_store_layout_on_disk(tmp_path):
    s = LocalStore(tmp_path)
    s.put_if_absent("plans/m/x/manifest.json", b"{}")
    assert (tmp_path / "plans/m/x/manifest.json").read_bytes() == b"{}"
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_s3_multipart_upload_is_create_only_and_hashes(s3_uri, tmp_path):
    bucket = s3_uri.split("/")[2]
    s = S3Store(bucket, "mp", multipart_threshold=5 << 20)
    src = tmp_path / "big.plan"
    src.write_bytes(os.urandom(17 << 20))
    up = s.upload_file("big/model.plan", src)
    assert up.sha256 == sha256_file(src)
    head = s.client.head_object(Bucket=bucket, Key="mp/big/model.plan")
    assert head["ETag"].strip('"').endswith("-2")  # two 16 MiB-chunk parts: it really went multipart
    with pytest.raises(AlreadyExists):
        s.upload_file("big/model.plan", src)
    dest = tmp_path / "back.plan"
    s.download_file("big/model.plan", dest, sha256=up.sha256)
    assert sha256_file(dest) == up.sha256


def test_s3_upload_stays_create_only_when_another_thread_finished_the_same_key(s3_uri, tmp_path):
    """Two threads of one store upload one key; the first finishes before the second's PUT is built.

    The second PUT must still carry If-None-Match (the first thread's finish must not drop the second's mark).
    """
    s = open_store(s3_uri)
    late_go, late_waiting, calls = threading.Event(), threading.Event(), []

    def hold_the_first_put(params, **_):
        if params.get("Key", "").endswith("race/model.plan") and not calls:
            calls.append(1)
            late_waiting.set()
            late_go.wait(30)

    s.client.meta.events.register_first("before-parameter-build.s3.PutObject", hold_the_first_put)
    a, b = tmp_path / "a.plan", tmp_path / "b.plan"
    a.write_bytes(b"ftrt" + b"a" * 4000)
    b.write_bytes(b"ftrt" + b"b" * 4000)
    late_result: list = []

    def late():
        try:
            late_result.append(s.upload_file("race/model.plan", b))
        except AlreadyExists as err:
            late_result.append(err)

    t = threading.Thread(target=late)
    t.start()
    assert late_waiting.wait(30)
    first = s.upload_file("race/model.plan", a)  # completes while the other PUT is held before its parameters
    late_go.set()
    t.join(30)
    assert isinstance(late_result[0], AlreadyExists), late_result
    dest = tmp_path / "back.plan"
    s.download_file("race/model.plan", dest, sha256=first.sha256)  # the first upload's bytes stayed


def test_opening_many_s3_stores_registers_the_create_only_hook_once(s3_uri):
    """A long-lived process (webhook receiver, control worker) opens a store per request; the shared client's
    event handlers must not pile up, one per store."""
    stores = [open_store(s3_uri) for _ in range(50)]
    emitter = stores[0].client.meta.events._emitter
    hooks = list(emitter._handlers.prefix_search("before-parameter-build.s3.PutObject"))
    assert sum(1 for h in hooks if getattr(h, "__name__", "") == "_add_if_none_match") == 1


def test_s3_upload_retries_a_conditional_write_conflict(s3_uri, tmp_path):
    """S3 answers 409 ConditionalRequestConflict when two conditional writes to one key race (moto never does):
    the first PUT gets that answer injected, the retry goes to moto's server and creates the object."""
    from botocore.awsrequest import AWSResponse

    s = open_store(s3_uri)
    conflicts = []

    def conflict_once(params, **_):
        if params.get("url_path", "").endswith("conflict/model.plan") and not conflicts:
            conflicts.append(1)
            error = {"Error": {"Code": "ConditionalRequestConflict", "Message": "racing conditional write"},
                     "ResponseMetadata": {"HTTPStatusCode": 409}}
            return AWSResponse("", 409, {}, None), error
        return None

    s.client.meta.events.register("before-call.s3.PutObject", conflict_once, unique_id="test-conflict-once")
    try:
        src = tmp_path / "p.plan"
        src.write_bytes(b"ftrt" + b"c" * 1000)
        up = s.upload_file("conflict/model.plan", src)
    finally:
        s.client.meta.events.unregister("before-call.s3.PutObject", unique_id="test-conflict-once")
    assert conflicts == [1]
    s.download_file("conflict/model.plan", tmp_path / "back.plan", sha256=up.sha256)


def test_file_store_writes_and_deletes_of_sibling_keys_do_not_trip_over_folder_pruning(tmp_path):
    """delete() prunes the folders it empties; a writer of a sibling key may have just made the same folder
    (the webhook's claim and release in the receiver's threads, a build's publish threads, gc beside a build)."""
    store = LocalStore(tmp_path / "store")
    errors, stop = [], threading.Event()

    def claim_and_release(tag: str, rounds: int | None) -> None:
        i = 0
        while (rounds is None and not stop.is_set()) or (rounds is not None and i < rounds):
            try:
                assert store.put_if_absent(f"webhook/exports/{tag}{i}.json", b"x")
                store.delete(f"webhook/exports/{tag}{i}.json")
            except (OSError, AssertionError) as err:  # pragma: no cover - the assertion below reports it
                errors.append(err)
            i += 1

    other = threading.Thread(target=claim_and_release, args=("r", None))
    other.start()
    claim_and_release("w", 1500)
    stop.set()
    other.join()
    assert not errors, errors[:3]
    assert not (tmp_path / "store" / "webhook").exists()  # the last delete pruned what it emptied


def test_opening_and_reading_a_file_store_creates_nothing(tmp_path):
    root = tmp_path / "missing" / "a" / "b"
    s = open_store(f"file://{tmp_path}/missing/x/%2e%2e/a/b")
    assert s.root == root  # %2e%2e is decoded and resolved: the check against allowed roots is the receiver's job
    assert s.get("model.onnx") is None and s.etag("x/y") is None and list(s.list()) == [] and not s.exists("k")
    s.delete("nothing/here")
    assert not (tmp_path / "missing").exists()
    assert s.put_if_absent("models/m/export.json", b"{}")  # the first write creates the folders it needs
    assert (root / "models" / "m" / "export.json").read_bytes() == b"{}"


def test_a_file_where_the_store_folder_would_be_has_no_keys_and_refuses_a_listing(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0")
    for root in (tmp_path / "passwd", tmp_path / "passwd" / "store"):
        s = open_store(root.as_uri())
        assert s.get("model.onnx") is None and s.etag("model.onnx") is None  # a key that is not there
        for prefix in ("", "plans/", "releases/encoder/"):  # a listing would read as an empty store: refused
            with pytest.raises(StoreError, match=f"cannot list .*{tmp_path / 'passwd'} is a file, not a folder"):
                list(s.list_sizes(prefix))


def test_an_s3_endpoint_that_is_not_there_fails_listings_and_deletes_as_unavailable(monkeypatch):
    import socket

    from trtfarm.errors import StoreUnavailable

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed again: nothing listens there
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
                        "TRTFARM_S3_MAX_ATTEMPTS": "1", "TRTFARM_S3_CONNECT_TIMEOUT": "1"}.items():
        monkeypatch.setenv(name, value)
    s = S3Store("plans", "farm", endpoint_url=endpoint)
    for call, where in ((lambda: list(s.list("plans/")), "list s3://plans/farm/plans/"),
                        (lambda: list(s.list_sizes()), "list s3://plans/farm after"),
                        (lambda: s.delete("plans/x/model.plan"), "delete s3://plans/farm/plans/x/model.plan")):
        with pytest.raises(StoreUnavailable, match=f"the S3 endpoint {endpoint} did not answer .* to {where}"):
            call()
