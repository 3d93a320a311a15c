"""The webhook's decisions without servers: signatures (HMAC and SNS), S3 records, claims."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from trtfarm.store import LocalStore
from trtfarm.triggers.webhook import (
    Export,
    Rejected,
    check_allowed,
    check_signature,
    check_sns_signature,
    claim,
    export_from_json,
    exports_from_s3_event,
    parse_sns,
    root_from_config,
    sign,
    sns_string_to_sign,
)

NOW = 1_800_000_000
TOPIC = "arn:aws:sns:us-east-1:123456789012:model-exports"
ROOTS = [root_from_config("s3://exports")]


def test_a_signed_recent_post_passes_and_anything_else_is_401():
    body = b'{"model_uri": "s3://exports/encoder/"}'
    ts = str(NOW)
    check_signature("s3cret", ts, sign("s3cret", ts, body), body, NOW + 10, 300)
    cases = [("s3cret", ts, sign("wrong", ts, body), body, "does not match"),
             ("s3cret", ts, sign("s3cret", ts, body), body + b" ", "does not match"),
             ("s3cret", str(NOW - 400), sign("s3cret", str(NOW - 400), body), body, "replay window"),
             ("s3cret", None, "sha256=00", body, "missing"),
             ("s3cret", "yesterday", "sha256=00", body, "not unix seconds")]
    for secret, t, sig, b, why in cases:
        with pytest.raises(Rejected, match=why) as rejected:
            check_signature(secret, t, sig, b, NOW, 300)
        assert rejected.value.status == 401


def test_the_replay_window_is_both_ways_and_its_edge_is_inside():
    body = b'{"model_uri": "s3://exports/encoder/"}'
    for skew in (-300, 0, 300):  # exactly the window, either way, is accepted
        ts = str(NOW + skew)
        check_signature("s3cret", ts, sign("s3cret", ts, body), body, NOW, 300)
    for skew in (-301, 301, 86_400):  # a post dated in the future is as stale as one from the past
        ts = str(NOW + skew)
        with pytest.raises(Rejected, match="replay window") as rejected:
            check_signature("s3cret", ts, sign("s3cret", ts, body), body, NOW, 300)
        assert rejected.value.status == 401


def test_a_generic_post_must_name_an_export_folder_that_exists():
    etags = {"s3://exports/team/encoder": '"abc"'}
    export = export_from_json(b'{"model_uri": "s3://exports/team/encoder/model.onnx"}', etags.get, ROOTS)
    assert export == Export("s3://exports/team/encoder", "encoder", "abc")
    for body, status in [(b"{not json", 400), (b'{"uri": "x"}', 400), (b'{"model_uri": "http://x/y"}', 400),
                         (b'{"model_uri": "s3://exports/missing/"}', 400)]:
        with pytest.raises(Rejected) as rejected:
            export_from_json(body, etags.get, ROOTS)
        assert rejected.value.status == status


def _record(key: str, event: str = "ObjectCreated:Put", etag: str = "e1") -> dict:
    return {"eventName": event, "s3": {"bucket": {"name": "exports"}, "object": {"key": key, "eTag": etag}}}


def test_s3_records_name_the_export_once_it_is_complete():
    message = json.dumps({"Records": [
        _record("team+a/encoder/farm.yaml"),                          # not the last file: ignored
        _record("team+a/encoder/model.onnx"),                         # a dropped folder is complete
        _record("team+a/encoder/model.onnx", "ObjectCreated:CompleteMultipartUpload"),
        _record("store/models/encoder/20261129T0000Z-abc/model.onnx"),  # registry: wait for export.json
        _record("store/models/encoder/20261129T0000Z-abc/export.json", etag="e2"),
        _record("team+a/encoder/model.onnx", "ObjectRemoved:Delete")]})
    exports = exports_from_s3_event(message, ROOTS)
    assert [(e.uri, e.name) for e in exports] == [
        ("s3://exports/team a/encoder", "encoder"), ("s3://exports/team a/encoder", "encoder"),
        ("s3://exports/store/models/encoder/20261129T0000Z-abc", "encoder")]
    assert exports[0].claim_id == exports[1].claim_id  # the multipart upload's two events are one export
    assert exports_from_s3_event(json.dumps({"Event": "s3:TestEvent"}), ROOTS) == []
    with pytest.raises(Rejected, match="outside the folders") as refused:
        exports_from_s3_event(message, [root_from_config("s3://exports/team a/decoder")])
    assert refused.value.status == 403


def test_sns_messages_need_an_allowed_topic():
    with pytest.raises(Rejected) as rejected:
        parse_sns(json.dumps({"Type": "Notification", "TopicArn": TOPIC + "-other"}).encode(), {TOPIC})
    assert rejected.value.status == 403
    with pytest.raises(Rejected) as rejected:
        parse_sns(b"[]", {TOPIC})
    assert rejected.value.status == 400


def _signing_cert():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256()))
    return key, cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("version,algorithm", [("1", hashes.SHA1()), ("2", hashes.SHA256())])
def test_sns_signatures_are_checked_against_the_signing_certificate(version, algorithm):
    key, pem = _signing_cert()
    msg = {"Type": "SubscriptionConfirmation", "MessageId": "m1", "Token": "t", "TopicArn": TOPIC,
           "Message": "confirm", "SubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription",
           "Timestamp": "2026-11-29T00:00:00.000Z", "SignatureVersion": version,
           "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem"}
    msg["Signature"] = base64.b64encode(key.sign(sns_string_to_sign(msg), padding.PKCS1v15(), algorithm)).decode()
    fetched = []
    check_sns_signature(msg, lambda url: fetched.append(url) or pem)
    assert fetched == [msg["SigningCertURL"]]
    for change in ({"Message": "tampered"}, {"SigningCertURL": "https://evil.example.com/cert.pem"},
                   {"SignatureVersion": "3"}):
        with pytest.raises(Rejected) as rejected:
            check_sns_signature({**msg, **change}, lambda url: pem)
        assert rejected.value.status == 401
    unsigned = {k: v for k, v in msg.items() if k != "Signature"}
    for bad, cert, why in ((unsigned, pem, "does not verify"), ({k: v for k, v in msg.items() if k !=
                                                                 "SigningCertURL"}, pem, "not an SNS certificate"),
                           (msg, b"not a certificate", "could not be checked")):
        with pytest.raises(Rejected, match=why) as rejected:
            check_sns_signature(bad, lambda url, cert=cert: cert)
        assert rejected.value.status == 401


def test_an_export_is_claimed_once(tmp_path):
    store = LocalStore(tmp_path)
    export = Export("s3://exports/encoder", "encoder", "abc")
    assert claim(store, export, "sns:1") is True
    assert claim(store, export, "sns:2") is False
    assert claim(store, Export("s3://exports/encoder", "encoder", "def"), "sns:3") is True  # a new upload
    event = export.event("sns:1")
    assert event["event"] == "trtfarm.model.exported" and event["resource"]["prefect.resource.id"] == \
        "trtfarm.model.encoder" and event["payload"]["model_uri"] == "s3://exports/encoder"


def test_a_post_marked_refit_sends_the_weights_updated_event():
    etags = {"s3://exports/encoder": "e"}
    export = export_from_json(b'{"model_uri": "s3://exports/encoder/", "refit": true}', etags.get, ROOTS)
    assert export.refit and export.event("hook")["event"] == "trtfarm.model.weights-updated"
    plain = export_from_json(b'{"model_uri": "s3://exports/encoder/"}', etags.get, ROOTS)
    assert plain.event("hook")["event"] == "trtfarm.model.exported"


def test_only_uris_under_the_allowed_roots_pass_and_dot_dot_never_does(tmp_path):
    roots = [root_from_config(str(tmp_path / "exports")), root_from_config("s3://models/team-a")]
    for ok in [f"file://{tmp_path}/exports/encoder", f"file://{tmp_path}/exports", "s3://models/team-a/encoder",
               f"file://localhost{tmp_path}/exports/a%20b"]:
        check_allowed(ok, roots)
    refused = [(f"file://{tmp_path}/exports-2/encoder", 403), ("s3://models/team-b/encoder", 403),
               ("s3://models/team-ab/encoder", 403), ("s3://other/team-a/encoder", 403), ("file:///etc/passwd", 403),
               (f"file://{tmp_path}/exports/%2e%2e/escape", 400), (f"file://{tmp_path}/exports/a/../../x", 400),
               (f"file://{tmp_path}/exports/%2E%2E", 400), ("s3://models/team-a/../team-b", 400),
               (f"file://evil.example{tmp_path}/exports/e", 400), ("s3://Not_A_Bucket/team-a", 400),
               ("http://models/team-a/encoder", 400)]
    for uri, status in refused:
        with pytest.raises(Rejected) as rejected:
            check_allowed(uri, roots)
        assert rejected.value.status == status, uri
    assert not list(tmp_path.iterdir())  # checking opened and created nothing


def test_a_symlink_inside_a_root_that_points_outside_it_is_refused(tmp_path):
    (tmp_path / "exports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "exports" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Rejected) as rejected:
        check_allowed(f"file://{tmp_path}/exports/link", [root_from_config(str(tmp_path / "exports"))])
    assert rejected.value.status == 403


def test_a_generic_post_outside_the_roots_never_reaches_the_store():
    opened = []
    with pytest.raises(Rejected) as rejected:
        export_from_json(b'{"model_uri": "s3://elsewhere/encoder/"}', opened.append, ROOTS)
    assert rejected.value.status == 403 and opened == []


def test_one_export_under_other_spellings_of_its_uri_is_one_claim(tmp_path):
    folder = tmp_path / "exports" / "encoder"
    folder.mkdir(parents=True)
    roots = [root_from_config(str(tmp_path / "exports"))]
    spellings = [folder.as_uri(), f"file://localhost{folder}/", f"file://{folder.parent}//encoder/",
                 f"file://{folder.parent}/%65ncoder", f"file://{folder}/model.onnx"]
    exports = [export_from_json(json.dumps({"model_uri": uri}).encode(), lambda _: '"v1"', roots) for uri in spellings]
    assert {e.uri for e in exports} == {folder.as_uri()}
    store = LocalStore(tmp_path / "store")
    assert [claim(store, e, "hook") for e in exports] == [True, False, False, False, False]


@pytest.mark.parametrize("body", [b'{"model_uri": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                  b'{"model_uri": "s3://exports/' + b"x" * 300 + b'/"}'])
def test_a_deep_or_overlong_post_is_400(body):
    with pytest.raises(Rejected) as rejected:
        export_from_json(body, lambda _: '"v1"', ROOTS)
    assert rejected.value.status == 400
    with pytest.raises(Rejected) as rejected:
        parse_sns(body, {TOPIC})
    assert rejected.value.status in (400, 403)


def test_each_refusal_of_a_request_has_its_status_and_names_its_cause():
    from trtfarm.triggers.webhook import location

    for body in (b"[1]", b'{"model_uri": 5}', b'{"model_uri": "http://exports/encoder/"}',
                 b'{"model_uri": "s3://exports/"}'):
        with pytest.raises(Rejected, match="body must be") as rejected:
            export_from_json(body, lambda uri: '"abc"', ROOTS)
        assert rejected.value.status == 400
    named = export_from_json(b'{"model_uri": "s3://exports/team/encoder/", "name": "enc-v2", "refit": true}',
                             lambda uri: '"abc"', ROOTS)
    assert (named.name, named.version, named.refit) == ("enc-v2", "abc", True)
    for msg in ({"Type": "Notification"}, {"TopicArn": TOPIC}):
        with pytest.raises(Rejected, match="not an SNS message") as rejected:
            parse_sns(json.dumps(msg).encode(), {TOPIC})
        assert rejected.value.status == 400
    with pytest.raises(Rejected, match="unknown SNS message Type 'Other'") as rejected:
        sns_string_to_sign({"Type": "Other"})
    assert rejected.value.status == 400
    for message, why in (("[1]", "not an S3 event notification"),
                         (json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}), "without s3")):
        with pytest.raises(Rejected, match=why) as rejected:
            exports_from_s3_event(message, ROOTS)
        assert rejected.value.status == 400
    edge = "s3://exports/" + "a" * 255
    assert location(edge).parts == ("a" * 255,)
    longest = "s3://exports/" + "/".join(["b" * 254] * 4) + "/" + "c" * (1024 - 4 * 255 - 1)
    assert len(location(longest).parts) == 5
    for uri in (edge + "a", longest + "c"):
        with pytest.raises(Rejected, match="longer than 255 bytes or the path longer than 1024") as rejected:
            location(uri)
        assert rejected.value.status == 400


def test_s3_records_keep_going_past_what_they_skip_and_carry_the_upload_version():
    records = [_record("team/encoder/model.onnx", "ObjectRemoved:Delete"), {"s3": {}},
               _record("store/models/encoder/x/model.onnx", etag='"e1"'),
               _record("store/models/encoder/x/export.json", etag='"e2"'),
               _record("team/decoder/model.onnx", etag="")]
    records[-1]["s3"]["object"]["sequencer"] = "0055AED6DCD90281E5"
    exports = exports_from_s3_event(json.dumps({"Records": records}), ROOTS)
    assert [(e.uri, e.version) for e in exports] == [("s3://exports/store/models/encoder/x", "e2"),
                                                     ("s3://exports/team/decoder", "0055AED6DCD90281E5")]


def test_an_unreadable_export_is_400_and_a_store_that_does_not_answer_is_502():
    from trtfarm.errors import StoreError

    class Answered(Exception):
        def __init__(self, status):
            self.response = {"ResponseMetadata": {"HTTPStatusCode": status}}

    def failing(cause, text="boom\nsecond line"):
        def etag(uri):
            raise StoreError(text) from cause
        return etag

    body = b'{"model_uri": "s3://exports/team/encoder/"}'
    for status, code in ((400, 400), (403, 400), (499, 400), (500, 502), (503, 502)):
        with pytest.raises(Rejected, match=f"HTTP {status}" if code == 400 else "did not answer: boom$") as rejected:
            export_from_json(body, failing(Answered(status)), ROOTS)
        assert rejected.value.status == code
    for cause in (None, OSError("refused")):
        with pytest.raises(Rejected, match="did not answer: boom$") as rejected:
            export_from_json(body, failing(cause), ROOTS)
        assert rejected.value.status == 502
    with pytest.raises(Rejected, match="did not answer: StoreError$"):
        export_from_json(body, failing(None, ""), ROOTS)


def test_an_export_becomes_one_event_and_one_claim_record(tmp_path):
    import uuid

    export = Export("s3://exports/encoder", "encoder", "abc", refit=False)
    event = export.event("sns:7")
    assert event["id"] == str(uuid.UUID(export.claim_id[:32])) and event["event"] == "trtfarm.model.exported"
    assert event["resource"] == {"prefect.resource.id": "trtfarm.model.encoder", "prefect.resource.name": "encoder"}
    assert event["payload"] == {"model_uri": "s3://exports/encoder", "version": "abc", "source": "sns:7"}
    assert datetime.fromisoformat(event["occurred"]).tzinfo is not None
    store = LocalStore(tmp_path)
    assert claim(store, export, "sns:7") is True
    [key] = store.list("")
    record = json.loads(store.get(key).data)
    assert {k: record[k] for k in ("uri", "name", "version", "source")} == {
        "uri": "s3://exports/encoder", "name": "encoder", "version": "abc", "source": "sns:7"}
    assert datetime.fromisoformat(record["claimed_at"]).tzinfo is not None
