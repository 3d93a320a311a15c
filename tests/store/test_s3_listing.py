"""A cold view's listings on S3 (moto's server over HTTP): read fast, in parts side by side, each object once.

The store a view surveys here has more plan objects than one page of S3's listing holds (1,000), so the survey
lists it in parts split at model prefixes. Its requests are counted twice: the store calls (tests/store_requests.py)
and the ListObjectsV2 pages botocore sends.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from datetime import datetime, timezone

import boto3
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store_requests import CountingStore
from trtfarm import layout
from trtfarm.state.listings import FIRST_PAGE, LIST_PARTS
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import open_store

MODELS, GPUS = 40, 40  # 40 models x 40 targets: 3,200 plan objects, 1,600 release pointers


def _keys() -> list[str]:
    """A store as runs leave it, every key spelled by trtfarm.layout (the bodies are not read by a listing)."""
    keys = []
    for i in range(MODELS):
        model, onnx = f"m{i:03d}", f"{i:012x}"
        keys += [layout.state_key(model), layout.export_file_key(layout.export_prefix(model, f"e1-{onnx}"),
                                                                 layout.EXPORT_NAME),
                 layout.report_key(model, "nightly-1", layout.OUTCOMES_NAME)]
        for g in range(GPUS):
            prefix = layout.plan_prefix(model, onnx, f"gpu{g}", "rtx-1.7", f"{i * 100 + g:012x}")
            keys += [layout.plan_key(prefix), layout.manifest_key(prefix), layout.release_key(model, f"gpu{g}",
                                                                                                "rtx-1.7")]
    keys.append(layout.release_key("m0", "gpu0", "rtx-1.7"))  # a model whose name prefixes others' ("m0" < "m000")
    return keys


def _filled(uri: str, keys: list[str]):
    """The store at ``uri`` holding ``keys``: on S3 put straight into the test's moto server (this process's), as
    bench/_moto.py fills its own (2,800 PUTs over HTTP would take half a minute); its listings are then answered over
    HTTP like any other."""
    store = open_store(uri)
    if uri.startswith("s3://"):
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        for key in keys:
            backend.put_object(store.bucket, f"{store.prefix}/{key}", b"{}")
        return store
    for key in keys:  # the file store is a folder of these keys (as bench/fleet_views.py writes it)
        path = store.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}")
    return store


def _pages(client) -> tuple[Counter, list[int]]:
    """ListObjectsV2 pages by (prefix, start) as botocore sends them, and the most in flight at once."""
    pages, flight, lock = Counter(), [0, 0], threading.Lock()

    def sent(params, context, **_):
        context["part"] = (params.get("Prefix"), params.get("StartAfter"))
        with lock:
            flight[0] += 1
            flight[1] = max(flight)

    def answered(context, **_):
        with lock:
            flight[0] -= 1
            pages[context["part"]] += 1

    client.meta.events.register("before-parameter-build.s3.ListObjectsV2", sent, unique_id="test-sent")
    client.meta.events.register("after-call.s3.ListObjectsV2", answered, unique_id="test-answered")
    return pages, flight


def _listed(survey: StoreSurvey) -> dict:
    """What a survey learned from its listings, without versions (which differ between backends)."""
    return {"models": survey.models(), "states": sorted(survey.states), "folders": {p: sorted(o) for p, o in
            survey.folders.items()}, "pointers": sorted(survey.pointers),
            "exports": {m: [e for e, _ in v] for m, v in survey.exports.items()},
            "runs": {m: [r for r, _ in v] for m, v in survey.runs.items()}}


def test_a_cold_view_lists_s3_in_parts_side_by_side_each_object_once(s3_uri, tmp_path):
    keys = _keys()
    s3 = _filled(s3_uri, keys)
    local = _filled((tmp_path / "store").as_uri(), keys)
    calls = Counter()
    pages, flight = _pages(s3.client)
    try:
        survey = StoreSurvey(CountingStore(s3, calls), None, runs=True)  # as a cold `trtfarm status` surveys
    finally:
        s3.client.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", unique_id="test-sent")
        s3.client.meta.events.unregister("after-call.s3.ListObjectsV2", unique_id="test-answered")
    assert _listed(survey) == _listed(StoreSurvey(local, None, runs=True))  # one listing's answer, in parts
    assert sum(len(o) for o in survey.folders.values()) == 2 * MODELS * GPUS > FIRST_PAGE
    # plans/ and releases/ past their first page: listed on from it, plans/ in parts split at the recorded models'
    # prefixes (the rest of releases/ fits one page)
    parts = [(prefix, start) for prefix, start in pages if start]
    assert sorted(p.rsplit("/", 1)[-1] for p, _ in parts).count("releases") == 1, pages
    assert 2 <= sorted(p.rsplit("/", 1)[-1] for p, _ in parts).count("plans") <= LIST_PARTS, pages
    assert all(n == 1 for n in pages.values()), pages  # no part, no listing asks for a second page
    # the records, then one listing of each prefix and the parts: not one listing per model, not the whole store
    assert sum(pages.values()) == 1 + 6 + len(parts), pages
    assert sum(n for (method, _), n in calls.items() if method.startswith("list")) == sum(pages.values()), calls
    assert flight[1] > 1, "the listings were sent one after another"


def test_a_listing_read_by_trtfarm_is_the_listing_botocore_reads(s3_uri):
    store = open_store(s3_uri)
    odd = ["odd/a b&c+d.json", "odd/caf\u00e9 %41.json", "odd/<x>'\".json"]  # escaped in XML, url-encoded by S3
    for key in odd:
        store.put_if_absent(key, b"x" * len(key))
    bucket, prefix = s3_uri.removeprefix("s3://").split("/", 1)
    plain = boto3.client("s3")  # botocore's own parser
    theirs = [(o["Key"].removeprefix(prefix + "/"), o["Size"], o["ETag"], o["LastModified"].timestamp())
              for p in plain.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
              for o in p.get("Contents", [])]
    ours = [(o.key, o.size, o.version, o.modified) for o in store.list_versions("")]
    assert ours == theirs and sorted(k for k, *_ in ours) == sorted(odd)
    head = store.client.head_object(Bucket=bucket, Key=f"{prefix}/{ours[0][0]}")  # a header's time (RFC 1123)
    assert abs(head["LastModified"].timestamp() - ours[0][3]) < 1


PAGE = (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>b</Name><Prefix>farm</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><EncodingType>url"
        b"</EncodingType><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;k</NextContinuationToken>"
        b"<Contents><Key>farm/a%26b</Key><LastModified>2026-12-04T03:18:20.000Z</LastModified><ETag>&quot;45ed"
        b"&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>16</Size><Owner><ID>x</ID><DisplayName>y"
        b"</DisplayName></Owner><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>farm/c</Key>"
        b"<LastModified>2026-12-04T03:18:21.000Z</LastModified><ETag>&#34;46&#34;</ETag><Size>17</Size><StorageClass>"
        b"STANDARD</StorageClass><RestoreStatus><IsRestoreInProgress>false</IsRestoreInProgress></RestoreStatus>"
        b"</Contents><CommonPrefixes><Prefix>farm/p/</Prefix></CommonPrefixes></ListBucketResult>")


def test_a_page_as_s3_writes_it_reads_the_same_by_its_leaves_as_by_its_tree():
    from xml.etree import ElementTree

    from trtfarm.store.s3_listing import _page_tree, listing_page

    fast = listing_page(PAGE)
    assert fast == _page_tree(ElementTree.fromstring(PAGE))
    assert [(o["Key"], o["ETag"], o["Size"], o["LastModified"].isoformat()) for o in fast["Contents"]] == [
        ("farm/a%26b", '"45ed"', 16, "2026-12-04T03:18:20+00:00"), ("farm/c", '"46"', 17, "2026-12-04T03:18:21+00:00")]
    assert fast["IsTruncated"] is True and fast["NextContinuationToken"] == "t&k" and fast["KeyCount"] == 2
    assert listing_page(PAGE.replace(b"<Key>farm/c</Key>", b"<Key><![CDATA[farm/c]]></Key>")) == fast  # the tree's


def _escaped(text: str, quote: str) -> str:
    """``text`` as an XML writer may escape it (``quote``: how a double quote is written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', quote)


_XML_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)


@st.composite
def _contents(draw, odd: bool) -> bytes:
    """One ``<Contents>`` element: S3's fields in S3's order, or (``odd``) maybe with extras, in other orders."""
    quote = draw(st.sampled_from(['"', "&quot;", "&#34;"]))
    when = draw(st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1), timezones=st.just(timezone.utc)))
    fields = [("Key", _escaped(draw(_XML_TEXT), quote)),
              ("LastModified", when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"),
              ("ETag", _escaped(f'"{draw(st.text("0123456789abcdef", min_size=1, max_size=32))}"', quote))]
    fields += [(name, "CRC32") for name in draw(st.lists(st.sampled_from(["ChecksumAlgorithm", "ChecksumType"]),
                                                          max_size=2))]
    fields.append(("Size", str(draw(st.integers(0, 2**40)))))
    if draw(st.booleans()):
        fields.append(("Owner", "<ID>x</ID><DisplayName>y</DisplayName>"))
    fields.append(("StorageClass", draw(st.sampled_from(["STANDARD", "GLACIER", "INTELLIGENT_TIERING"]))))
    if odd and draw(st.booleans()):
        fields.append(("RestoreStatus", "<IsRestoreInProgress>false</IsRestoreInProgress>"))
    if odd and draw(st.booleans()):
        fields = draw(st.permutations(fields))
    return b"<Contents>" + b"".join(f"<{n}>{v}</{n}>".encode() for n, v in fields) + b"</Contents>"


@st.composite
def _listing_pages(draw) -> bytes:
    page = [f"<{n}>{v}</{n}>".encode() for n, v in [
        ("Name", "b"), ("Prefix", _escaped(draw(_XML_TEXT), "&quot;")), ("KeyCount", "3"), ("MaxKeys", "1000"),
        ("IsTruncated", draw(st.sampled_from(["true", "false"]))),
        ("NextContinuationToken", _escaped(draw(_XML_TEXT), "&#34;"))]]
    page = draw(st.permutations(page))
    at = draw(st.integers(0, len(page)))
    odd = draw(st.booleans())  # half the pages as S3 writes them: one pass over all their objects
    objects = draw(st.lists(_contents(odd), max_size=6))
    if draw(st.booleans()):  # anywhere: between two objects a page is read object by object
        objects.insert(draw(st.integers(0, len(objects))), b"<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>")
    return (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
            b'2006-03-01/">' + b"".join(page[:at] + objects + page[at:]) + b"</ListBucketResult>")


@functools.cache
def _listing_shape():
    import botocore.session

    return botocore.session.get_session().get_service_model("s3").operation_model("ListObjectsV2").output_shape


@settings(max_examples=150, deadline=None)
@given(_listing_pages())
def test_every_page_reads_as_botocores_own_parser_reads_it(body):
    """The referee is botocore's REST-XML parser with its model of ListObjectsV2, as a plain client parses."""
    from botocore.parsers import RestXMLParser

    from trtfarm.store.s3_listing import OBJECT_FIELDS, listing_page

    theirs = RestXMLParser().parse({"body": body, "headers": {}, "status_code": 200}, _listing_shape())
    ours = listing_page(body)

    def plain(page: dict) -> dict:
        out = {k: v for k, v in page.items() if k not in ("ResponseMetadata", "Contents")}
        out["Contents"] = [{k: v.timestamp() if k == "LastModified" else v for k, v in o.items() if k in OBJECT_FIELDS}
                           for o in page.get("Contents", [])]
        return out

    assert plain(ours) == plain(theirs)
