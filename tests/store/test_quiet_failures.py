"""An S3 store that cannot be used, as a user meets it (issue 59): an endpoint that refuses connections or never
answers, no credentials, a profile that is not there, half a key pair.

Each is at most 2 lines (``status`` without a fleet file says that it uses the built-in fleet, then one ``error:``
line), with no traceback: retries are not printed one by one (``-v`` prints each), and credentials that are missing
or broken name what to set. ``status`` sends several requests at once, so a retry line printed per request showed 14.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import endpoints
from tests.conftest import RTX_FLEET


def status(cwd: Path, env: dict[str, str], *extra: str, store: str = "s3://bucket/x") -> tuple[int, list[str]]:
    """``trtfarm status --store STORE`` with no AWS setting but ``env`` (nor ~/.aws): exit code and the lines shown."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TRTFARM_", "PREFECT_"))}
    base.update(HOME=str(cwd), AWS_CONFIG_FILE=str(cwd / ".aws/config"), COLUMNS="200",
                AWS_SHARED_CREDENTIALS_FILE=str(cwd / ".aws/credentials"), AWS_EC2_METADATA_DISABLED="true")
    done = subprocess.run([sys.executable, "-m", "trtfarm", "status", "--store", store, *extra], cwd=cwd,
                          env={**base, **env}, capture_output=True, text=True, timeout=120)
    shown = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, shown


def the_error(lines: list[str]) -> str:
    [line] = [line for line in lines if line.startswith("error:")]
    return line


KEYS = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}


def test_an_endpoint_that_refuses_connections_is_one_error_line_naming_the_tries(tmp_path):
    endpoint = endpoints.closed_endpoint()
    code, lines = status(tmp_path, {**KEYS, "AWS_ENDPOINT_URL": endpoint})
    assert code == 3 and len(lines) <= 2, lines
    error = the_error(lines)
    assert f"the S3 endpoint {endpoint} did not answer (EndpointConnectionError)" in error, error
    assert "after 3 attempt(s)" in error and "trying again" not in "\n".join(lines), lines


def test_verbose_shows_each_try(tmp_path):
    code, lines = status(tmp_path, {**KEYS, "AWS_ENDPOINT_URL": endpoints.closed_endpoint()}, "-v")
    tries = [line for line in lines if "trying again" in line]
    assert code == 3 and any("(2 of 3" in t for t in tries) and any("(3 of 3" in t for t in tries), lines


@pytest.fixture
def silent_endpoint():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    with endpoints.silent_endpoint() as url:
        yield url


def test_an_endpoint_that_never_answers_says_its_wait_once_then_fails_in_one_line(tmp_path, silent_endpoint):
    """The wait of a timeout is long (a silent one looks hung): it is said once, not once per request and try."""
    (tmp_path / "fleet.yaml").write_text(RTX_FLEET)
    env = {**KEYS, "AWS_ENDPOINT_URL": silent_endpoint, "TRTFARM_S3_READ_TIMEOUT": "1",
           "TRTFARM_S3_CONNECT_TIMEOUT": "1", "TRTFARM_S3_MAX_ATTEMPTS": "2"}
    code, lines = status(tmp_path, env, "--targets-file", str(tmp_path / "fleet.yaml"))
    assert code == 3 and len(lines) == 2, lines
    assert lines[0].startswith(f"the artifact store at {silent_endpoint}/bucket did not answer (ReadTimeoutError); "
                               "trying again (2 of 2, read timeout 1 s)"), lines
    assert "after 2 attempt(s)" in the_error(lines)


def test_no_credentials_name_the_variables_and_the_profile_to_set(tmp_path, s3_endpoint):
    code, lines = status(tmp_path, {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_DEFAULT_REGION": "us-east-1"})
    assert code == 1 and len(lines) <= 2, lines
    error = the_error(lines)
    assert "no AWS credentials to " in error and " s3://bucket/x/" in error, error
    assert all(name in error for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE")), error
    assert "Unable to locate credentials" not in error


def _profile(home: Path, name: str) -> None:
    (home / ".aws").mkdir(exist_ok=True)
    (home / ".aws/credentials").write_text(f"[{name}]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    (home / ".aws/config").write_text(f"[profile {name}]\nregion = us-east-1\n")


def test_a_profile_that_is_not_there_names_the_profiles_that_are(tmp_path, s3_endpoint):
    _profile(tmp_path, "farm")
    code, lines = status(tmp_path, {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_PROFILE": "frm"})
    assert code == 2 and len(lines) <= 2, lines
    error = the_error(lines)
    assert "AWS_PROFILE='frm': no such profile" in error and "(profiles there: farm)" in error, error


def test_a_profile_that_is_there_reaches_the_store(tmp_path, s3_uri):
    _profile(tmp_path, "farm")
    code, lines = status(tmp_path, {"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], "AWS_PROFILE": "farm"},
                         store=s3_uri)
    assert code == 0 and not any(line.startswith("error:") for line in lines), lines


def test_half_a_key_pair_names_the_half_that_is_missing(tmp_path, s3_endpoint):
    code, lines = status(tmp_path, {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "x"})
    assert code == 2 and len(lines) <= 2, lines
    error = the_error(lines)
    assert "AWS credentials in the environment lack AWS_SECRET_ACCESS_KEY" in error, error
