"""`trtfarm images build` against a real Docker engine (Debian's dockerd on a private socket, no network).

No registry is reachable here, so the test images are built FROM scratch with a static busybox: one whose probe
reports the declared TensorRT version (tagged) and one that lies (refused, and no tag left behind).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trtfarm.project.fleet_file import load_fleet
from trtfarm.workers.images import DockerUnavailable, docker_client, image_jobs

from .conftest import REPO

pytestmark = pytest.mark.integration

FLEET = """\
version: 1
toolchains:
  trt-10.16: {flavour: tensorrt, version: "10.16.1.11", image: "trtfarm-test-worker:trt-10.16.1.11"}
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106", image: "trtfarm-test-worker:trt-11.4.0.106"}
gpus:
  h100: {nvml_name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0", memory_gib: 80, pool: gpu-h100}
targets:
  - {id: h100-trt10.16, gpu: h100, toolchain: trt-10.16}
  - {id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}
"""
# The busybox image's probe answers with the version baked in at build time (a real image asks the module).
DOCKERFILE = """\
FROM scratch
COPY busybox /bin/busybox
COPY probe /usr/local/bin/trtfarm-toolchain-version
ARG TOOLCHAIN_FLAVOUR
ARG TOOLCHAIN_VERSION
ENV PATH=/usr/local/bin:/bin
ENTRYPOINT ["/usr/local/bin/trtfarm-toolchain-version"]
"""
PROBE = "#!/bin/busybox sh\n/bin/busybox cat /etc/toolchain 2>/dev/null || echo \"tensorrt {version}\"\n"


def _ensure_debian_packages(**provides: str) -> None:
    """Debian's docker.io and busybox-static are what the tests run: install them when this machine lacks them.

    ``provides`` maps each package to the program it installs (``dpkg -s`` still succeeds for a removed package).
    """
    missing = [p for p, program in provides.items() if not shutil.which(program) and not Path(program).is_file()]
    if missing:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env,
                       capture_output=True)


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory):
    """A private dockerd (vfs storage, no bridge, no iptables) on its own socket; stopped by its PID."""
    _ensure_debian_packages(**{"docker.io": "dockerd", "busybox-static": "/bin/busybox"})
    root = Path("/tmp") / f"trtfarm-dockerd-{os.getpid()}"  # short: the socket path must stay under 108 bytes
    root.mkdir(exist_ok=True)
    sock = f"unix://{root}/docker.sock"
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none",
                             "--storage-driver=vfs", "--host", sock, "--data-root", str(root / "data"),
                             "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid")],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    old = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = sock
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                docker_client()
                break
            except DockerUnavailable:
                assert proc.poll() is None, (root / "dockerd.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "dockerd did not start"
                time.sleep(0.5)
        yield sock
    finally:
        pid = int((root / "docker.pid").read_text()) if (root / "docker.pid").exists() else proc.pid
        os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            proc.wait()
        log.close()
        if old is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = old
        shutil.rmtree(root, ignore_errors=True)


def _context(tmp_path: Path, name: str, reported_version: str) -> Path:
    ctx = tmp_path / name
    ctx.mkdir()
    shutil.copy("/bin/busybox", ctx / "busybox")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    probe = ctx / "probe"
    probe.write_text(PROBE.format(version=reported_version))
    probe.chmod(0o755)
    return ctx


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtfarm", "images", "build", *args], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=300)


def test_a_truthful_image_is_tagged_and_a_lying_one_is_refused(dockerd, tmp_path):
    import docker

    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(FLEET)
    honest = _cli("--targets-file", str(fleet), "--toolchain", "trt-10.16", "--context",
                  str(_context(tmp_path, "honest", "10.16.1.11")), "--dockerfile", "Dockerfile", "--build-network",
                  "none", "--json")
    assert honest.returncode == 0, honest.stderr
    [row] = json.loads(honest.stdout)
    assert row["status"] == "tagged" and row["detail"] == "probe: tensorrt 10.16.1.11"
    client = docker.from_env()
    assert client.images.get("trtfarm-test-worker:trt-10.16.1.11").id == row["image_id"]

    # the same image declared as TensorRT 11.4: the probe says 10.16, so it must not get the 11.4 tag
    lying = _cli("--targets-file", str(fleet), "--toolchain", "trt-11.4", "--context",
                 str(_context(tmp_path, "lying", "10.16.1.11")),
                 "--dockerfile", "Dockerfile", "--build-network", "none", "--json")
    assert lying.returncode == 1
    [row] = json.loads(lying.stdout)
    assert row["status"] == "refused"
    assert "the image has tensorrt 10.16.1.11; gpu_targets.yaml declares tensorrt 11.4.0.106" in row["detail"]
    tags = {t for image in client.images.list() for t in image.tags}
    assert "trtfarm-test-worker:trt-11.4.0.106" not in tags
    assert not [t for t in tags if t.startswith("trtfarm-candidate:")]  # no candidate left behind


def test_push_reports_a_registry_that_refuses(dockerd, tmp_path):
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(FLEET.replace('image: "trtfarm-test-worker:trt-10.16.1.11"',
                                   'image: "127.0.0.1:9/trtfarm-test-worker:trt-10.16.1.11"'))
    pushed = _cli("--targets-file", str(fleet), "--toolchain", "trt-10.16", "--context",
                  str(_context(tmp_path, "push", "10.16.1.11")), "--dockerfile", "Dockerfile", "--build-network",
                  "none", "--push", "--json")
    assert pushed.returncode == 1, pushed.stderr
    [row] = json.loads(pushed.stdout)
    assert row["status"] == "tagged" and row["pushed"] is False and "push failed" in row["detail"]


def test_the_probe_output_must_name_a_flavour_and_a_version(dockerd, tmp_path):
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(FLEET)
    ctx = _context(tmp_path, "broken", "10.16.1.11")
    (ctx / "probe").write_text("#!/bin/busybox sh\necho oops\n")
    broken = _cli("--targets-file", str(fleet), "--toolchain", "trt-10.16", "--context", str(ctx), "--dockerfile",
                  "Dockerfile", "--build-network", "none", "--json")
    assert broken.returncode == 1
    assert "toolchain probe failed: the probe printed 'oops'" in json.loads(broken.stdout)[0]["detail"]


def test_no_docker_engine_is_a_service_not_there_in_one_line(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "images", "build", "--targets-file",
                           str(REPO / "gpu_targets.yaml")], capture_output=True, text=True, env=env)
    assert done.returncode == 3, done.stderr  # infrastructure (a service not there), not the user's input
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"no Docker engine reachable at unix://{tmp_path}/nothing.sock" in done.stderr and "start dockerd" in \
        done.stderr


def test_one_job_per_toolchain_with_its_base_image_and_dockerfile():
    jobs = {j.toolchain: j for j in image_jobs(load_fleet(REPO / "gpu_targets.yaml"))}
    assert set(jobs) == {"trt-11.4", "trt-10.16", "rtx-1.7"}
    assert jobs["trt-10.16"].dockerfile == "infra/docker/Dockerfile" and jobs["trt-10.16"].base_image.startswith(
        "nvcr.io/nvidia/tensorrt:")
    assert jobs["rtx-1.7"].dockerfile == "infra/docker/Dockerfile.rtx" and jobs["rtx-1.7"].tag == \
        "trtfarm-worker:rtx-1.7.1.116"
