"""Kubernetes work pools: base job templates that pin each GPU pool to its GPU nodes, and Helm values per pool.

A Prefect Kubernetes worker turns each flow run into a Job from its pool's base job template. For a GPU pool the
template selects nodes by the label NVIDIA's GPU Feature Discovery sets (``nvidia.com/gpu.product``, the NVML name
with spaces as dashes) and requests ``nvidia.com/gpu``, so a build for an H100 pool can only land on an H100 node.
Pools whose targets are all TensorRT-RTX ahead-of-time builds run on CPU nodes and request no GPU.

``job_template`` and ``worker_values`` are pure: ``trtfarm pools sync --type kubernetes`` creates pools with them,
and ``trtfarm pools k8s --out infra/k8s`` writes them as files for GitOps.
"""

from __future__ import annotations

from trtfarm.vocabulary.fleet import Flavour, Fleet

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"


def gpu_product(nvml_name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3`` (GPU Feature Discovery's label value)."""
    return "-".join(nvml_name.split())


def _variables(image: str | None, product: str | None, gpus: int) -> dict:
    props = {
        "name": {"type": "string", "description": "Job name prefix"},
        "namespace": {"type": "string", "default": "trtfarm"},
        "image": {"type": "string", "default": image or "trtfarm-worker:latest",
                  "description": "worker image carrying this pool's toolchain (trtfarm images build)"},
        "image_pull_policy": {"type": "string", "enum": ["IfNotPresent", "Always", "Never"],
                              "default": "IfNotPresent"},
        "service_account_name": {"type": "string", "default": "trtfarm-builder"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
        "command": {"type": "string", "description": "filled in by the worker"},
        "finished_job_ttl": {"type": "integer", "default": 3600},
        "cpu_request": {"type": "string", "default": "4"},
        "memory_request": {"type": "string", "default": "16Gi"},
        "job_watch_timeout_seconds": {"type": "integer", "default": None},
        "pod_watch_timeout_seconds": {"type": "integer", "default": 300},
        "stream_output": {"type": "boolean", "default": True},
    }
    if product:
        props["gpu_product"] = {"type": "string", "default": product,
                                "description": f"node label {GPU_PRODUCT_LABEL}: the GPU model this pool builds on"}
        props["gpus"] = {"type": "integer", "default": gpus, "minimum": 1, "description": "GPUs per build job"}
    return {"type": "object", "properties": props}


def job_template(pool: str, fleet: Fleet) -> dict:
    """The Prefect Kubernetes base job template for ``pool`` (GPU node selector and GPU request where it needs one)."""
    gpus = [g for g in fleet.gpus.values() if g.pool == pool]
    if not gpus:
        raise ValueError(f"no GPU of gpu_targets.yaml uses pool {pool!r}")
    targets = [t for t in fleet.targets if fleet.gpus[t.gpu].pool == pool]
    aot_only = all(fleet.toolchains[t.toolchain].flavour is Flavour.tensorrt_rtx for t in targets)
    images = sorted({fleet.toolchains[t.toolchain].image or "" for t in targets} - {""})
    product = None if aot_only else gpu_product(gpus[0].nvml_name)
    container = {"name": "prefect-job", "image": "{{ image }}", "imagePullPolicy": "{{ image_pull_policy }}",
                 "args": "{{ command }}", "env": "{{ env }}",
                 "resources": {"requests": {"cpu": "{{ cpu_request }}", "memory": "{{ memory_request }}"}}}
    pod = {"restartPolicy": "Never", "serviceAccountName": "{{ service_account_name }}", "containers": [container]}
    if product:
        container["resources"]["limits"] = {GPU_RESOURCE: "{{ gpus }}"}
        pod["nodeSelector"] = {GPU_PRODUCT_LABEL: "{{ gpu_product }}"}
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    manifest = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"generateName": "{{ name }}-", "namespace": "{{ namespace }}", "labels": "{{ labels }}"},
                "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": "{{ finished_job_ttl }}",
                         "template": {"metadata": {"labels": {"trtfarm.io/pool": pool}}, "spec": pod}}}
    return {"job_configuration": {"command": "{{ command }}", "env": "{{ env }}", "labels": "{{ labels }}",
                                  "name": "{{ name }}", "namespace": "{{ namespace }}", "job_manifest": manifest,
                                  "cluster_config": "{{ cluster_config }}",
                                  "job_watch_timeout_seconds": "{{ job_watch_timeout_seconds }}",
                                  "pod_watch_timeout_seconds": "{{ pod_watch_timeout_seconds }}",
                                  "stream_output": "{{ stream_output }}"},
            "variables": _variables(images[0] if images else None, product, 1)}


def worker_values(pool: str, api_url: str = "http://prefect-server.prefect.svc.cluster.local:4200/api") -> dict:
    """Values for Prefect's ``prefect-worker`` Helm chart (self-hosted server): one Kubernetes worker per pool.

    The worker only submits Jobs; the Jobs run the toolchain's image on the pool's GPU nodes (``job_template``).
    """
    return {"fullnameOverride": f"trtfarm-worker-{pool}",
            "worker": {"apiConfig": "server",
                       "serverApiConfig": {"apiUrl": api_url},
                       "config": {"workPool": pool, "type": "kubernetes", "queryInterval": 1, "prefetchSeconds": 5,
                                  "installPolicy": "never"},
                       "image": {"repository": "prefecthq/prefect", "prefectTag": "3.9.1-python3.11-kubernetes"}}}
