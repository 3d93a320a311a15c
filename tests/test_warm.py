"""A farm child warms the S3 client and the installed toolchains while Prefect's engine starts the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import sys
import flows.build_target  # what the engine loads: it starts the warm-up
from trtfarm.building.warm import wait_warm
from trtfarm.store import s3_client
wait_warm()
print("boto3" in sys.modules, "tensorrt_rtx" in sys.modules, len(s3_client.CLIENTS))
"""


def run_child(tmp_path: Path, extra_path: str = "") -> list[str]:
    env = {"PATH": "/usr/bin:/bin", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false", "HOME": str(tmp_path),
           "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": ":".join(filter(None, [extra_path, str(REPO)]))}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_loading_the_child_flow_warms_the_s3_client_and_the_toolchain(tmp_path):
    assert run_child(tmp_path) == ["True", "True", "1"]


def test_a_toolchain_that_fails_to_import_does_not_break_the_warm_up(tmp_path):
    broken = tmp_path / "site"
    (broken / "tensorrt").mkdir(parents=True)
    (broken / "tensorrt" / "__init__.py").write_text("raise RuntimeError('stub wheel: download the libraries')\n")
    assert run_child(tmp_path, str(broken)) == ["True", "True", "1"]  # the build that needs it says why
