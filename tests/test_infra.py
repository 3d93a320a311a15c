"""infra/: the Dockerfiles pass hadolint, compose.yaml validates against the compose specification, and each
Kubernetes work pool's job template, rendered the way a Prefect worker renders it, pins GPU pools to their GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prefect.utilities.templating import apply_values

from trtfarm.project.fleet_file import load_fleet
from trtfarm.vocabulary.fleet import Flavour
from trtfarm.workers.k8s import GPU_PRODUCT_LABEL, GPU_RESOURCE, job_template, worker_values
from trtfarm.workers.pools import desired_pools

from .conftest import REPO

BIN = Path(sys.executable).parent
FLEET = load_fleet(REPO / "gpu_targets.yaml")
GPU_POOLS = [p for p in desired_pools(FLEET, "kubernetes") if p.gpus]


def test_the_worker_dockerfiles_pass_hadolint():
    done = subprocess.run([str(BIN / "hadolint"), "infra/docker/Dockerfile", "infra/docker/Dockerfile.rtx"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_file_validates_against_the_compose_specification():
    done = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                           "infra/compose.yaml"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_stack_has_the_farm_with_health_checks_and_gpu_device_requests():
    compose = yaml.safe_load((REPO / "infra/compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "prefect-server", "minio", "minio-buckets", "webhook", "worker-control"} <= set(services)
    one_shot = {"minio-buckets", "farm-setup"}
    assert all("healthcheck" in s for name, s in services.items() if name not in one_shot)
    assert "postgresql+asyncpg://" in services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert "mc mb" in services["minio-buckets"]["command"][0]
    images = {tc.image for tc in FLEET.toolchains.values()}
    workers = {name: s for name, s in services.items() if name.startswith("worker-")}
    for name, s in workers.items():
        assert s["image"] in images, name
        pool = s["command"][s["command"].index("--pool") + 1]
        assert pool == "trtfarm-control" or pool in {g.pool for g in FLEET.gpus.values()}, name
        gpu_pool = any(g.pool == pool for g in FLEET.gpus.values()) and not all(
            FLEET.toolchains[t.toolchain].flavour is Flavour.tensorrt_rtx
            for t in FLEET.targets if FLEET.gpus[t.gpu].pool == pool)
        devices = s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        assert bool(devices) == gpu_pool, name
        if devices:
            assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]


def _render(template: dict, **values) -> dict:
    """What a Prefect worker does: variable defaults, overridden by the run's values, applied to the template."""
    defaults = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    return apply_values(template["job_configuration"], {**defaults, **values})


@pytest.mark.parametrize("pool", [p.name for p in GPU_POOLS])
def test_each_pool_job_template_is_current_and_pins_the_pool_to_its_gpu(pool):
    template = job_template(pool, FLEET)
    assert json.loads((REPO / f"infra/k8s/job-template-{pool}.json").read_text()) == template, \
        "infra/k8s is stale: run `trtfarm pools k8s`"
    rendered = _render(template, name="build-target-abc", command="prefect flow-run execute",
                       env={"TRTFARM_STORE": "s3://plans/farm"}, image="registry.local/trtfarm-worker:x")
    job = rendered["job_manifest"]
    spec = job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "registry.local/trtfarm-worker:x" and container["env"] == {
        "TRTFARM_STORE": "s3://plans/farm"}
    assert job["metadata"]["generateName"] == "build-target-abc-"
    gpu = next(g for g in FLEET.gpus.values() if g.pool == pool)
    aot_only = all(FLEET.toolchains[t.toolchain].flavour is Flavour.tensorrt_rtx
                   for t in FLEET.targets if FLEET.gpus[t.gpu].pool == pool)
    if aot_only:  # TensorRT-RTX ahead-of-time builds: CPU nodes, no GPU requested
        assert "nodeSelector" not in spec and GPU_RESOURCE not in container["resources"].get("limits", {})
    else:
        assert spec["nodeSelector"] == {GPU_PRODUCT_LABEL: gpu.nvml_name.replace(" ", "-")}
        assert container["resources"]["limits"] == {GPU_RESOURCE: 1}
        two = _render(template, gpus=2)["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
        assert two["resources"]["limits"] == {GPU_RESOURCE: 2}


@pytest.mark.parametrize("pool", [p.name for p in desired_pools(FLEET, "kubernetes")])
def test_each_pool_has_helm_values_for_a_worker_on_that_pool(pool):
    text = (REPO / f"infra/k8s/values-{pool}.yaml").read_text()
    values = yaml.safe_load(text)
    assert values == worker_values(pool)
    assert values["worker"]["config"] == {**values["worker"]["config"], "workPool": pool, "type": "kubernetes"}
    assert text.startswith(f"# helm install trtfarm-{pool} prefect/prefect-worker")
