"""Reading what the store holds: list manifests, load one by key, URL or path, render it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rich.markup import escape
from rich.table import Table

from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.layout import (
    MANIFEST_NAME,
    folder_of,
    manifest_key,
    parse_model,
    parse_plan_key,
    parse_short_ref,
    plans_prefix,
    provenance_name,
    releases_prefix,
)
from trtfarm.publishing.provenance import provenance_from_json
from trtfarm.publishing.publish import read_manifest
from trtfarm.store import open_store, uri_parts
from trtfarm.vocabulary.manifest import Manifest, manifest_from_json


class Listed(NamedTuple):
    """One published manifest: its store key, its URL (for people) and the manifest."""

    key: str
    url: str
    manifest: Manifest


def list_manifests(store_uri: str, model: str | None = None) -> list[Listed]:
    """Every ``plans/**/manifest.json`` in the store (optionally of one model)."""
    store = open_store(store_uri)
    return manifests_in(store, model)


def manifests_in(store, model: str | None = None, problems: list[str] | None = None) -> list[Listed]:
    """Every ``plans/**/manifest.json`` of an open store, ordered by model, GPU, toolchain version and age.

    With ``problems``, a damaged manifest is skipped and described there; without, it raises ``CorruptObject``.
    """
    prefix = plans_prefix(model)
    found = []
    for key in store.list(prefix):
        if key.endswith(f"/{MANIFEST_NAME}"):
            try:
                m = read_manifest(store, key)
            except CorruptObject as damaged:
                if problems is None:
                    raise
                problems.append(str(damaged))
                continue
            if m is not None:
                found.append(Listed(key, store.url(key), m))
    return sorted(found, key=lambda x: (x.manifest.model.name, x.manifest.target.gpu,
                                        x.manifest.target.toolchain_version, x.manifest.created_at))


def store_models(store, *, plans: bool = True, releases: bool = True) -> list[str]:
    """The model names the store holds plans (and/or) releases of, sorted: for messages naming the known ones."""
    prefixes = [p for p, wanted in ((plans_prefix(), plans), (releases_prefix(), releases)) if wanted]
    return sorted({m for prefix in prefixes for key in store.list(prefix) if (m := parse_model(key))})


def load_manifest(ref: str, store_uri: str) -> tuple[str, Manifest]:
    """Load a manifest from an ``s3://``/``file://`` URL, a local path, or a key in ``store_uri``."""
    url, m, _ = load_attested(ref, store_uri, provenance=False)
    return url, m


def _local(path: Path) -> tuple[str, bytes, Callable[[str], bytes | None]]:
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserInputError(f"{path}: cannot read the manifest ({err.strerror})") from err

    def sibling(name: str) -> bytes | None:
        return (path.parent / name).read_bytes() if (path.parent / name).is_file() else None

    return path.as_uri() if path.is_absolute() else str(path), data, sibling


def load_attested(ref: str, store_uri: str, provenance: bool = True) -> tuple[str, Manifest, dict | None]:
    """``load_manifest`` with the provenance statement beside the manifest (None when there is none, or not asked)."""
    scheme, host, path = uri_parts(ref)
    if scheme == "file" or (scheme != "s3" and Path(ref).is_file()):
        url, data, sibling = _local(Path(path) if scheme == "file" else Path(ref))
    else:
        if scheme == "s3":
            store, key = open_store(f"s3://{host}"), path.lstrip("/")
        else:
            store, key = open_store(store_uri), ref.rstrip("/")
            if parse_short_ref(key) is not None:
                key = _by_short_ref(store, key)
            if not key.endswith(MANIFEST_NAME):
                key = manifest_key(key)
        blob = store.get(key)
        if blob is None:
            raise UserInputError(f"no manifest at {store.url(key)}; `trtfarm plans` lists the published ones")
        url, data = store.url(key), blob.data

        def sibling(name: str) -> bytes | None:
            got = store.get(f"{folder_of(key)}/{name}")
            return got.data if got else None
    manifest = manifest_from_json(data, url)
    if not provenance:
        return url, manifest, None
    names = [provenance_name(hashlib.sha256(data).hexdigest())]
    if url.endswith(".manifest.json"):  # pulled: model.plan.manifest.json beside model.plan.provenance.json
        names.insert(0, url.rsplit("/", 1)[-1].removesuffix(".manifest.json") + ".provenance.json")
    prov = next((d for d in map(sibling, names) if d is not None), None)
    return url, manifest, provenance_from_json(prov, f"{url}: provenance") if prov else None


def provenance_mismatch(doc: dict, m: Manifest) -> str | None:
    """Why a provenance statement is not the one of this manifest's plan (its subject names other bytes), or None."""
    subjects = doc.get("subject")
    digests = [s.get("digest", {}).get("sha256") for s in subjects if isinstance(s, dict)] \
        if isinstance(subjects, list) else []
    if digests != [m.plan.sha256]:
        shown = ", ".join(str(d)[:16] for d in digests) or "nothing"
        return (f"the provenance's subject is sha256 {shown}, not this manifest's plan ({m.plan.sha256[:16]}): it "
                "describes another plan, so it says nothing about how this one was built")
    return None


def provenance_table(doc: dict) -> Table:
    """The provenance statement in rows: what came out, what went in, who built it."""
    pred = doc["predicate"]
    build, run = pred["buildDefinition"], pred["runDetails"]
    ext, internal = build.get("externalParameters", {}), build.get("internalParameters", {})
    worker, image = internal.get("worker", {}), next(
        (d for d in run["builder"].get("builderDependencies", []) if d.get("name") == "worker-image"), {})
    t = Table(title=f"provenance ({doc['predicateType']})", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    rows = [("subject", ", ".join(f"{s['name']} sha256 {s['digest'].get('sha256')}" for s in doc["subject"])),
            ("builder", run["builder"]["id"]),
            ("worker", f"{worker.get('name')} on {worker.get('host')}"
                       + (f", pool {worker['pool']}" if worker.get("pool") else "")),
            ("image", f"{image.get('uri')} " + (f"sha256:{image['digest']['sha256']}" if image.get("digest") else
                                                f"({image.get('annotations', {}).get('note', 'no digest known')})")),
            ("gpu", str(worker.get("gpu"))),
            ("toolchain", " ".join(str(v) for v in internal.get("toolchain", {}).values())),
            ("build digest", str(internal.get("build_digest"))),
            ("onnx", f"{ext.get('onnx_digest')} from {ext.get('source_uri')}"),
            ("precision", f"{ext.get('precision', {}).get('recipe')} (converted onnx "
                          f"{ext.get('precision', {}).get('converted_onnx_digest')})"),
            *[(f"input {d['name']}", f"{d.get('uri')} sha256 {d.get('digest', {}).get('sha256')}")
              for d in build.get("resolvedDependencies", [])],
            ("invocation", f"{run['metadata'].get('invocationId')} ({run['metadata'].get('startedOn', '?')} -> "
                           f"{run['metadata'].get('finishedOn', '?')})")]
    for k, v in rows:
        t.add_row(escape(k), escape(v))
    return t


def _by_short_ref(store, ref: str) -> str:
    """The manifest key a ``MODEL/GPU/BUILD`` reference names (a build digest prefix is enough)."""
    model, gpu, build = parse_short_ref(ref)
    found = [k for k in store.list(plans_prefix(model)) if k.endswith(f"/{MANIFEST_NAME}")
             and (f := parse_plan_key(k)) and f.gpu == gpu and f.build12.startswith(build)]
    if len(found) != 1:
        raise UserInputError(f"{ref}: {'no' if not found else len(found)} published plans match (MODEL/GPU/BUILD); "
                             "`trtfarm plans` lists them")
    return found[0]


def manifest_table(url: str, m: Manifest) -> Table:
    """A two-column table of the fields people look for first.

    Its title is the plan's ``MODEL/GPU/BUILD`` (short: a title never splits a word); the URL is a row, where a
    path longer than the column folds.
    """
    from trtfarm.layout import short_ref

    t = Table(title=escape(f"manifest {short_ref(manifest_key(folder_of(m.plan.key)))}"),
              show_header=False)
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    rows = [
        ("manifest", url),
        ("model", f"{m.model.name}  onnx {m.model.onnx_digest[:12]}  graph {m.model.graph_digest[:12]}"),
        ("precision", f"{m.precision.recipe} (converted {m.precision.converted_onnx_digest[:12]})"),
        ("target", f"{m.target.target_id}: {m.target.gpu_name} (cc {m.target.compute_capability}), "
                   f"class {m.target.compat_class}"),
        ("toolchain", f"{m.target.flavour} {m.target.toolchain_version}, hardware compatibility "
                      f"{m.target.hardware_compatibility_level}, flags {', '.join(m.target.builder_flags) or '-'}"),
        ("build", f"{m.build.build_digest[:12]} in {m.build.wall_s:.2f} s on {m.build.worker_host} "
                  f"(built for {m.build.built_for_target})"),
        ("profiles", "; ".join(", ".join(f"{n}={':'.join('x'.join(map(str, r[k])) for k in ('min', 'opt', 'max'))}"
                                         for n, r in p.items()) for p in m.build.profiles) or "-"),
        ("timing cache", "used" if m.build.timing_cache.used else f"not used: {m.build.timing_cache.reason}"),
        ("plan", f"{m.plan.key}  {m.plan.bytes:,} bytes  sha256 {m.plan.sha256}"),
        *[(f"check {k}", f"{v.status}: {v.detail}") for k, v in m.verification],
        ("reproduce", m.build.reproduce),
        ("created", f"{m.created_at} by trtfarm {m.trtfarm_version}"),
    ]
    for k, v in rows:
        t.add_row(k, escape(v))
    return t


def derivation_table(d, source: str) -> Table:
    """Profiles side by side: shapes, traffic share, padding overhead, memory."""
    t = Table(title=escape(f"profiles derived from {source}" + (f" (split on {d.split_axis})" if d.split_axis
                                                                  else "")))
    for col in ("profile", "inputs min : opt : max", "traffic", "padding", "max shape", "activation est."):
        t.add_column(col, overflow="fold")
    for i, p in enumerate(d.profiles):
        shapes = "\n".join(f"{n} {r.text().replace(':', ' : ')}" for n, r in p.profile.root.items())
        mem = f"{p.activation_bytes / 2**20:,.1f} MiB" if p.activation_bytes else "(give --model)"
        t.add_row(str(i), shapes, f"{p.share:.1%}", f"+{p.padding_overhead:.1%}",
                  " x ".join(str(v) for v in p.max_shape.values()), mem)
    t.caption = "score = relative memory + mean octaves from opt (lower is better): " + ", ".join(
        f"{a['profiles']}: {a['score']}" for a in d.alternatives)
    return t
