"""README and docs/*.md claims that no other test held: each sentence, as written, against the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trtfarm.errors import UserInputError
from trtfarm.store import open_store

from .conftest import REPO
from .test_triton import ONE_CLASS, fleet, publish, write

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # the README links each docs/ page
README = " ".join(" ".join(p.read_text() for p in DOCS).split())  # the words, however a paragraph is wrapped


def test_worker_refuses_to_start_when_the_signing_key_does_not_load(tmp_path):
    assert "`trtfarm worker` refuses to start when the key does not load" in README
    (tmp_path / "bad.pem").write_text("not a key\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    cmd = [sys.executable, "-m", "trtfarm", "worker", "--pool", "rtx-4090", "--check-only", "--targets-file",
           str(REPO / "gpu_targets.yaml")]
    refused = subprocess.run(cmd, env={**env, "TRTFARM_SIGNING_KEY": str(tmp_path / "bad.pem")}, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "TRTFARM_SIGNING_KEY" in errors[0] and "not a PEM private key" in errors[0]
    assert subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, timeout=120).returncode == 0


@pytest.mark.integration
def test_triton_asks_for_a_rebuild_of_a_plan_from_before_manifest_schema_2(tmp_path):
    assert "A plan built before schema 2 has no record, and the command asks for a rebuild." in README
    store, fleet_file = open_store((tmp_path / "store").as_uri()), fleet(tmp_path, ONE_CLASS)
    outcomes = publish(store, fleet_file, tmp_path / "export")
    for o in outcomes.values():  # as a schema 1 manifest is on disk: no I/O record, no schema 2 fields
        path = tmp_path / "store" / o.manifest_key
        doc = json.loads(path.read_text())
        doc["schema_version"] = 1
        doc["plan"].pop("io", None)
        doc["verification"].pop("api", None)
        path.write_text(json.dumps(doc))
    with pytest.raises(UserInputError, match=r"manifest schema 1\); rebuild and release them"):
        write(store, fleet_file, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_the_readmes_test_pointers_name_files_that_hold_what_they_say():
    """A sentence that sends a reader to a test for a flow names the file that drives it (docs/triggers.md)."""
    pointers = {"tests/flows/test_farm.py drives the same flow against moto's SNS and S3": "sns.create_topic"}
    for sentence, code in pointers.items():
        assert sentence in README
        assert code in (REPO / sentence.split()[0]).read_text()
