"""The serving image pinned: a plan runs only with the TensorRT version that built it.

A toolchain in ``gpu_targets.yaml`` may name the images that serve its plans (``serving_images``: a tritonserver tag,
say, with the TensorRT version inside it). The manifest records that declaration at build time. ``trtfarm triton``
and ``trtfarm pull`` refuse a plan whose TensorRT flavour or version differs from a declared serving image's, as
recorded then or as the fleet declares it now, naming both. The most common break after a rebuild is exactly this:
a plan built with another TensorRT version than the serving container's.
"""

from __future__ import annotations

from trtfarm.errors import MismatchError
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.vocabulary.manifest import Manifest, ServingImageInfo


class ServingImageMismatch(MismatchError):
    """The plan's TensorRT is not the serving image's: the command exits 1 with this one line."""


def declared_images(m: Manifest, fleet: Fleet | None = None) -> list[ServingImageInfo]:
    """The serving images of the plan's toolchain: recorded in the manifest, and declared in ``fleet`` now."""
    found = list(m.target.serving_images)
    for tc in (fleet.toolchains.values() if fleet else []):
        if tc.flavour.value == m.target.flavour and tc.version == m.target.toolchain_version:
            found += [ServingImageInfo(image=s.image, flavour=(s.flavour or tc.flavour).value,
                                       tensorrt_version=s.tensorrt_version) for s in tc.serving_images]
    return list({(s.image, s.flavour, s.tensorrt_version): s for s in found}.values())


def _same_version(plan_version: str, declared: str) -> bool:
    """A declared version may omit the build number: ``11.4.0`` matches ``11.4.0.106``."""
    parts = declared.split(".")
    return plan_version.split(".")[: len(parts)] == parts


def check_serving_images(m: Manifest, source: str, fleet: Fleet | None = None) -> list[ServingImageInfo]:
    """Return the plan's declared serving images; ``ServingImageMismatch`` when one carries another TensorRT."""
    version = m.plan.header_version or m.target.toolchain_version
    images = declared_images(m, fleet)
    for s in images:
        if s.flavour != m.target.flavour or not _same_version(version, s.tensorrt_version):
            raise ServingImageMismatch(
                f"{source}: the plan was built with {m.target.flavour} {version}, but its serving image {s.image} "
                f"carries {s.flavour} {s.tensorrt_version}; rebuild the plan with a toolchain of "
                f"{s.flavour} {s.tensorrt_version}, or declare the serving image that carries {version} "
                "(serving_images of the toolchain in gpu_targets.yaml)")
    return images
