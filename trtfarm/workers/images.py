"""Worker images, one per toolchain version in gpu_targets.yaml, built with the Docker SDK and checked before tagging.

Each image is built under a temporary candidate tag from ``infra/docker/Dockerfile`` (NVIDIA's TensorRT image as the
base) or ``infra/docker/Dockerfile.rtx`` (a Python image with tensorrt-rtx from PyPI). Then the image is run with no
network and asked what toolchain it really has (``trtfarm-toolchain-version`` prints ``<flavour> <version>`` from the
module's own ``__version__``). Only an image whose answer matches the declared version gets the toolchain's tag; a
lying image is removed and reported. ``push`` pushes the tags that passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtfarm.errors import InfrastructureError, UserInputError
from trtfarm.machine.header import version_matches
from trtfarm.vocabulary.fleet import Flavour, Fleet

PROBE = "trtfarm-toolchain-version"
DOCKERFILES = {Flavour.tensorrt: "infra/docker/Dockerfile", Flavour.tensorrt_rtx: "infra/docker/Dockerfile.rtx"}


class DockerUnavailable(InfrastructureError):
    """No Docker engine answered: a service that is not there (exit 3); the line says how to start or name one."""

    service = "Docker"
    exit_code = 3


@dataclass(frozen=True)
class ImageJob:
    """One image to build: the toolchain it carries and where it comes from."""

    toolchain: str
    flavour: str
    version: str
    tag: str
    base_image: str | None
    dockerfile: str


@dataclass
class ImageResult:
    """What happened to one image: ``tagged``, ``refused`` (the probe disagreed) or ``failed`` (the build failed)."""

    toolchain: str
    tag: str
    status: str
    detail: str
    image_id: str | None = None
    pushed: bool = False

    def to_json(self) -> dict:
        """The ``--json`` row."""
        return {"toolchain": self.toolchain, "tag": self.tag, "status": self.status, "detail": self.detail,
                "image_id": self.image_id, "pushed": self.pushed}


def image_jobs(fleet: Fleet, toolchains: list[str] | None = None, dockerfile: str | None = None) -> list[ImageJob]:
    """One job per toolchain (those named, else every toolchain that declares an ``image``)."""
    unknown = [t for t in toolchains or [] if t not in fleet.toolchains]
    if unknown:
        raise UserInputError(f"unknown toolchain(s) {unknown}; gpu_targets.yaml declares {list(fleet.toolchains)}")
    jobs = []
    for key, tc in fleet.toolchains.items():
        if toolchains and key not in toolchains:
            continue
        if not tc.image:
            if toolchains:
                raise UserInputError(f"toolchain {key!r} has no `image:` in gpu_targets.yaml; add e.g. "
                                     f"image: trtfarm-worker:{key}")
            continue
        jobs.append(ImageJob(key, tc.flavour.value, tc.version, tc.image, tc.base_image,
                             dockerfile or DOCKERFILES[tc.flavour]))
    return jobs


def docker_client():
    """A Docker SDK client from the environment (``DOCKER_HOST``), checked with a ping."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as err:  # wraps connection errors
        import os

        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise DockerUnavailable(f"no Docker engine reachable at {where} ({type(err).__name__}: {err}). Fix: start "
                                "dockerd, or point DOCKER_HOST at a running engine") from err
    return client


def parse_probe(output: str) -> tuple[str, str]:
    """``"tensorrt 10.16.1.11"`` -> (flavour, version); anything else is the image's fault."""
    parts = output.strip().split()
    if len(parts) != 2:
        raise ValueError(f"the probe printed {output.strip()[:200]!r}, not '<flavour> <version>'")
    return parts[0], parts[1]


def build_image(client, job: ImageJob, context: Path, log: Callable[[str], None] = lambda _: None,
                network_mode: str | None = None) -> ImageResult:
    """Build ``job`` under a candidate tag, run the probe, and tag it only if the toolchain is the declared one."""
    import docker

    candidate = f"trtfarm-candidate:{uuid.uuid4().hex[:12]}"
    args = {"TOOLCHAIN_FLAVOUR": job.flavour, "TOOLCHAIN_VERSION": job.version,
            **({"BASE_IMAGE": job.base_image} if job.base_image else {})}
    try:
        for chunk in client.api.build(path=str(context), dockerfile=job.dockerfile, tag=candidate, buildargs=args,
                                      rm=True, forcerm=True, decode=True, network_mode=network_mode):
            if "error" in chunk:
                raise RuntimeError(chunk["error"].strip())
            if line := (chunk.get("stream") or "").strip():
                log(line)
    except (RuntimeError, docker.errors.APIError) as err:
        _remove(client, candidate)
        return ImageResult(job.toolchain, job.tag, "failed", f"build failed: {err}")
    image = client.images.get(candidate)
    try:
        output = client.containers.run(candidate, entrypoint=[PROBE], network_mode="none", remove=True,
                                       environment={"TRTFARM_TOOLCHAIN_FLAVOUR": job.flavour})
        flavour, version = parse_probe(output.decode(errors="replace"))
    except (docker.errors.ContainerError, docker.errors.APIError, ValueError) as err:
        _remove(client, candidate)
        return ImageResult(job.toolchain, job.tag, "refused", f"toolchain probe failed: {err}")
    if flavour != job.flavour or not version_matches(version, job.version):
        _remove(client, candidate)
        return ImageResult(job.toolchain, job.tag, "refused",
                           f"the image has {flavour} {version}; gpu_targets.yaml declares {job.flavour} {job.version}."
                           f" Not tagged {job.tag}. Fix: use a base image that ships {job.version} (base_image: in "
                           "gpu_targets.yaml), or correct the declared version")
    repo, _, tag = job.tag.rpartition(":") if ":" in job.tag.rsplit("/", 1)[-1] else (job.tag, "", "latest")
    image.tag(repo, tag)
    client.images.remove(candidate, noprune=True)
    return ImageResult(job.toolchain, job.tag, "tagged", f"probe: {flavour} {version}", image.id)


def push_image(client, result: ImageResult) -> None:
    """Push a tagged image; the registry's refusal is reported in the result."""
    repo, _, tag = result.tag.rpartition(":")
    errors = [c["error"] for c in client.images.push(repo, tag=tag, stream=True, decode=True) if "error" in c]
    result.pushed = not errors
    if errors:
        result.detail += f"; push failed: {errors[-1]}"


def _remove(client, ref: str) -> None:
    import docker

    try:
        client.images.remove(ref, force=True)
    except docker.errors.NotFound:  # already gone (a failed build leaves nothing under the tag)
        pass
