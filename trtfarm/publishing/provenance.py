"""The provenance beside each manifest: an in-toto statement with the SLSA provenance v1 predicate.

It records what went in (every model file with its sha256 and URI, the ONNX and graph digests, the precision step,
the build spec digest, the toolchain, the worker, its image and GPU) and what came out (the plan's sha256 as the
subject; the manifest as a byproduct). It is written before the manifest, named by the manifest's sha256, and the
plan folder's signature covers it (publish.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from trtfarm import __version__, layout
from trtfarm.errors import UserInputError
from trtfarm.signing.bundle import statement
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.workers.built_by import WorkerIdentity

SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:trtfarm:build-type:tensorrt-plan:v1"  # docs/signing.md describes its parameters
PYPI = {"tensorrt": "tensorrt", "tensorrt_rtx": "tensorrt-rtx"}


@dataclass(frozen=True)
class BuildContext:
    """What the manifest does not hold: who built it, and the converted ONNX the builder parsed (when converted)."""

    worker: WorkerIdentity
    converted_uri: str | None = None
    converted_sha256: str | None = None
    started_on: str | None = None
    signed_by_worker: str | None = None  # the id of the key that signs this build on its worker (None: unsigned)
    release_key: str | None = None  # the id of the run's key, which signs its releases (None: the run signs none)


def _model_files(m: Manifest) -> list[dict]:
    folder = m.model.source_uri.rsplit("/", 1)[0]
    deps = []
    for i, f in enumerate(m.model.files):
        uri = m.model.source_uri if i == 0 else f"{folder}/{f.name}"
        deps.append({"name": f.name, "uri": uri, "digest": {"sha256": f.sha256}})
    return deps


def _image(w: WorkerIdentity) -> dict:
    dep = {"name": "worker-image", "uri": w.image or "none", "annotations": {"note": w.image_note}}
    if w.image_digest:
        dep["digest"] = {"sha256": w.image_digest}
    return dep


def provenance_statement(m: Manifest, manifest_sha256: str, ctx: BuildContext) -> dict:
    """The SLSA provenance v1 statement of the plan that ``m`` (whose bytes hash to ``manifest_sha256``) describes."""
    t, w = m.target, ctx.worker
    deps = _model_files(m)
    if ctx.converted_uri and ctx.converted_sha256:
        deps.append({"name": "precision-converted.onnx", "uri": ctx.converted_uri,
                     "digest": {"sha256": ctx.converted_sha256}})
    external = {"model": m.model.name, "source_uri": m.model.source_uri, "onnx_digest": m.model.onnx_digest,
                "graph_digest": m.model.graph_digest, "target": t.target_id,
                "precision": {"recipe": m.precision.recipe, "converted_onnx_digest": m.precision.converted_onnx_digest},
                "profiles": m.build.profiles, "reproduce": m.build.reproduce}
    internal = {"build_digest": m.build.build_digest, "builder_settings": m.build.settings,
                "compat_class": t.compat_class, "built_for_target": m.build.built_for_target,
                "toolchain": {"flavour": t.flavour, "version": t.toolchain_version}, "worker": w.to_json(),
                "signing": {"signed_by_worker": ctx.signed_by_worker, "release_key": ctx.release_key}}
    builder_id = f"urn:trtfarm:worker:{w.pool}/{w.name}" if w.pool else f"urn:trtfarm:worker:{w.name}"
    predicate = {
        "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": external,
                            "internalParameters": internal, "resolvedDependencies": deps},
        "runDetails": {
            "builder": {"id": builder_id, "version": {"trtfarm": __version__},
                        "builderDependencies": [
                            {"name": "toolchain", "uri": f"pkg:pypi/{PYPI.get(t.flavour, t.flavour)}@"
                                                         f"{t.toolchain_version}"}, _image(w)]},
            "metadata": {"invocationId": m.build.flow_run_id or f"local build on {w.host}",
                         **({"startedOn": ctx.started_on} if ctx.started_on else {}), "finishedOn": m.created_at},
            "byproducts": [{"name": layout.MANIFEST_NAME, "digest": {"sha256": manifest_sha256}}],
        },
    }
    return statement([{"name": layout.PLAN_NAME, "digest": {"sha256": m.plan.sha256}}], SLSA_PROVENANCE, predicate)


def provenance_bytes(doc: dict) -> bytes:
    """The stored form of a statement."""
    return (json.dumps(doc, indent=2) + "\n").encode()


def provenance_from_json(data: bytes, source: str) -> dict:
    """Parse a stored provenance statement; a clear error when it is not one."""
    try:
        doc = json.loads(data)
        ok = doc.get("predicateType") == SLSA_PROVENANCE and doc["predicate"]["buildDefinition"]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserInputError(f"{source}: not an in-toto provenance statement ({type(err).__name__}: {err})") from err
    if not ok:
        raise UserInputError(f"{source}: not a SLSA provenance v1 statement (predicateType "
                             f"{doc.get('predicateType')!r})")
    return doc
