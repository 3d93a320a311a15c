"""The one-story matrix on S3: the same states, readers and rules as ``test_one_story.py``, on moto's S3 server.

Each state's copy of the farm is put in a bucket of moto's server on 127.0.0.1 (``s3_endpoint``), object for object,
and each model's state is recorded there (signed, as the runs that built it into S3 would have left it); for a
``warm`` state the views read the untouched bucket first. Then the state's change is put into the bucket (the objects
it rewrote, put again; those it deleted, deleted) as another tool would make it. Every reader then reads the bucket
(``s3://...``) twice, and ``disagreements`` and ``second_run_changes`` judge the answers, as on the file store.

CI runs one state of each object of the family (the untouched release and each of the release's objects, in a
variant, reader, attestation and cache drawn with a fixed seed, ``SEED``): 8 states, and the state the whole
sample found wrong once (``FOUND``). ``TRTFARM_STORY_S3_ALL=1`` runs the whole sample ``test_one_story.py`` runs on
the file store.
"""

from __future__ import annotations

import hashlib
import os
import random
import uuid
from pathlib import Path

import pytest

from . import test_one_story as story
from .story_farm import State, all_states, sampled_states
from .test_one_story import SAMPLE, _said, disagreements, named_by_pointers, read_all, read_views, second_run_changes

farm, others = story.farm, story.others  # the matrix's fixtures: the built farm, mlp's untouched rows

pytestmark = pytest.mark.integration
SEED = 58


def one_of_each_object(seed: int = SEED) -> list[State]:
    """One state of each object the family changes (and the untouched release), drawn with ``seed``."""
    rng, by_object = random.Random(seed), {}
    for state in all_states():
        by_object.setdefault(state.obj, []).append(state)
    return [rng.choice(states) for _, states in sorted(by_object.items())]


# found by the whole sample on S3: a plan swapped for another model's of the same size kept an S3 record current
# (its size stood for its ETag), and status called released and signed what pull refused
FOUND = [State("trusted", "attested", "cold", "plan", "other-model")]
STATES = sampled_states(SAMPLE) if os.environ.get("TRTFARM_STORY_S3_ALL") else [*one_of_each_object(), *FOUND]


class Bucket:
    """A bucket of moto's server holding a copy of a farm's store folder, kept equal to the folder on ``sync``."""

    def __init__(self) -> None:
        import boto3

        self.client, self.name = boto3.client("s3"), f"story-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=self.name)
        self.uri, self.put = f"s3://{self.name}/farm", {}

    def sync(self, folder: Path) -> None:
        """Put each file of ``folder`` whose bytes are not what the bucket holds; delete the keys it no longer has."""
        files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
        for key, path in files.items():
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if self.put.get(key) != digest:
                self.client.put_object(Bucket=self.name, Key=f"farm/{key}", Body=data)
                self.put[key] = digest
        for key in set(self.put) - set(files):
            self.client.delete_object(Bucket=self.name, Key=f"farm/{key}")
            del self.put[key]


@pytest.mark.parametrize("state", [pytest.param(s, id=s.id) for s in STATES])
def test_every_reader_tells_one_story_on_s3(farm, others, state, tmp_path, monkeypatch, s3_endpoint):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))  # this machine's caches: this case's own
    (tmp_path / "tmp").mkdir()
    folder_uri, fleet = farm.copy(state, tmp_path / "farm")
    bucket = Bucket()
    bucket.sync(tmp_path / "farm/store")
    # each model's state recorded in the bucket against its own ETags and signed by the workers' key, as the runs
    # that built it into S3 would have left it (the folder's records name the folder's versions)
    recorded = story._invoke(["status", "--record", "--store", bucket.uri, "--targets-file",
                              str(farm.root / "build.yaml")])
    assert recorded.code == 0 and not recorded.crash, recorded.line()
    if state.cache == "warm":
        read_views(bucket.uri, fleet)
    farm.change(state, tmp_path / "farm")
    bucket.sync(tmp_path / "farm/store")
    first = read_all(bucket.uri, fleet, tmp_path / "run1")
    second = read_all(bucket.uri, fleet, tmp_path / "run2")
    wrong = disagreements(state, first, farm, others, named_by_pointers(bucket.uri))
    wrong += second_run_changes(_said(first, tmp_path / "run1"), _said(second, tmp_path / "run2"))
    assert not wrong, f"{state.id} on S3:\n  " + "\n  ".join(wrong)


def test_the_sample_holds_every_object_of_the_family():
    """The CI sample is no narrower than the family: each object (and the untouched release) is in it."""
    assert {s.obj for s in one_of_each_object()} == {s.obj for s in all_states()}
