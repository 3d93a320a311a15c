"""Optimization profiles derived from logged shapes.

1. Columns that always hold the same value form one *axis* (``input_ids[1]`` and ``attention_mask[1]`` are the
   sequence axis); dimension 0 shared by every input is the batch axis; constant columns are static.
2. Profiles split the *split axis* (the dynamic non-batch axis with the widest range) at bucket boundaries. Within a
   profile: the batch axis spans observed min..max (max rounded up to a power of two, capped by ``max_batch`` and the
   token budget); other axes span the bucket of the smallest request to the profile's boundary; ``opt`` is the
   median of the traffic the profile serves, rounded up to its bucket.
3. Each split is scored by what the seed article names: activation memory (each context reserves memory for its
   profile's max shape, weighted by the traffic the profile serves) plus tactic fit (mean |log2(shape / opt)| per
   axis, in octaves: tactics are timed at opt). Memory is relative to one profile (1.0); fit is absolute, so
   traffic that already sits close to one opt is not split. A further profile is kept only when it cuts the score
   by ``min_gain``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
import yaml

from trtfarm.errors import UserInputError
from trtfarm.onnxfile import load_model
from trtfarm.profiles.profile import InputRange, Profile, ProfilesFile
from trtfarm.profiles.shapelog import ShapeTable

Column = tuple[str, int]
MemoryModel = Callable[[dict[str, list[int]]], float]  # input shapes at a profile's max -> activation memory


@dataclass(frozen=True)
class Constraints:
    """What the deployment imposes on the profiles."""

    caps: dict[Column, int] = field(default_factory=dict)
    max_batch: int | None = None
    granularity: int = 16
    max_profiles: int = 2
    min_gain: float = 0.25
    min_share: float = 0.005
    max_tokens: int | None = None  # per context: product of the dynamic axes' max


@dataclass(frozen=True)
class Axis:
    """One dimension of the traffic, shared by the columns that always agree."""

    name: str
    columns: tuple[Column, ...]
    kind: str  # "batch", "dynamic" or "static"
    values: np.ndarray  # per distinct row


@dataclass
class DerivedProfile:
    """One profile, with what it serves."""

    profile: Profile
    share: float
    padding_overhead: float
    max_shape: dict[str, int]  # axis -> size at the profile's max
    activation_bytes: int | None = None  # estimated from the ONNX when a model was given


@dataclass
class Derivation:
    """The chosen profiles and the figures behind the choice."""

    profiles: list[DerivedProfile]
    records: int
    rejected: int
    split_axis: str | None
    buckets: dict[str, list[int]]
    alternatives: list[dict]


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def _bucket_up(x, g: int):
    return ((x + g - 1) // g) * g


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> int:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return int(values[order][np.searchsorted(cum, cum[-1] / 2)])


def find_axes(table: ShapeTable) -> list[Axis]:
    """Group identical columns into axes and classify them."""
    groups: list[list[int]] = []
    for c in range(len(table.columns)):
        match = next((g for g in groups if np.array_equal(table.rows[:, g[0]], table.rows[:, c])), None)
        if match is None:
            groups.append([c])
        else:
            match.append(c)
    first_dims = {c for c, (_, d) in enumerate(table.columns) if d == 0}
    axes = []
    for g in groups:
        cols = tuple(table.columns[c] for c in g)
        vals = table.rows[:, g[0]]
        if vals.min() == vals.max():
            kind = "static"
        elif first_dims and first_dims <= set(g):
            kind = "batch"
        else:
            kind = "dynamic"
        axes.append(Axis("batch" if kind == "batch" else f"{cols[0][0]}[{cols[0][1]}]", cols, kind, vals))
    return axes


class _Search:
    """Scores candidate splits of the traffic on the split axis."""

    def __init__(self, table: ShapeTable, c: Constraints, memory: MemoryModel | None) -> None:
        self.axes, self.counts, self.c, self.ranks = find_axes(table), table.counts, c, table.inputs
        axes = self.axes
        self.caps = {a.name: min([c.caps[col] for col in a.columns if col in c.caps], default=None) for a in axes}
        dynamic = [a for a in axes if a.kind == "dynamic"]
        self.split = max(dynamic, key=lambda a: np.log2(max(a.values.max(), 1) / max(a.values.min(), 1)),
                         default=None)
        self.memory = memory or (lambda shapes: float(max(np.prod(s) for s in shapes.values())))  # elements

    def input_shapes(self, sizes: dict[str, int], ranks: dict[str, int]) -> dict[str, list[int]]:
        """Axis sizes -> the shape of every input."""
        axis_of = {col: a.name for a in self.axes for col in a.columns}
        return {n: [sizes[axis_of[(n, d)]] for d in range(rank)] for n, rank in ranks.items()}

    def ranges(self, mask: np.ndarray, lo: int | None, hi: int | None) -> dict[str, tuple[int, int, int]]:
        """min/opt/max per axis for the rows in ``mask`` (split axis bounded by (lo, hi])."""
        w, g, out = self.counts[mask], self.c.granularity, {}
        for a in self.axes:
            v = a.values[mask]
            if a.kind == "static":
                out[a.name] = (int(v[0]),) * 3
                continue
            if a.kind == "batch":  # a batcher can always send one request alone
                mn, mx = 1, _pow2_ceil(int(v.max()))
                if self.c.max_batch:
                    mx = min(mx, self.c.max_batch)
            else:
                mn = lo + 1 if a is self.split and lo is not None else int(_bucket_up(int(v.min()), g))
                mx = hi if a is self.split and hi is not None else int(_bucket_up(int(v.max()), g))
                if self.caps[a.name]:
                    mx = min(mx, self.caps[a.name])
            opt = _weighted_median(v, w)
            opt = opt if a.kind == "batch" else int(_bucket_up(opt, g))
            out[a.name] = (mn, min(max(opt, mn), mx), max(mx, mn))
        self._apply_token_budget(out)
        return out

    def _apply_token_budget(self, out: dict[str, tuple[int, int, int]]) -> None:
        batch = next((a.name for a in self.axes if a.kind == "batch"), None)
        if not (self.c.max_tokens and batch):
            return
        others = int(np.prod([out[a.name][2] for a in self.axes if a.kind == "dynamic"]))
        mn, opt, mx = out[batch]
        allowed = 1 << max(0, (self.c.max_tokens // max(others, 1)).bit_length() - 1)
        mx = max(mn, min(mx, allowed))
        out[batch] = (mn, min(opt, mx), mx)

    def _fit(self, mask: np.ndarray, r: dict[str, tuple[int, int, int]]) -> float:
        """This profile's part of the mean |log2(shape / opt)| over all records."""
        total = np.zeros(int(mask.sum()))
        for a in self.axes:
            if a.kind != "static":
                total += np.abs(np.log2(np.maximum(a.values[mask], 1) / max(r[a.name][1], 1)))
        return float((total * self.counts[mask]).sum() / self.counts.sum())

    def score(self, bounds: list[int]) -> tuple[float, float, list[tuple[np.ndarray, dict]]] | None:
        """(memory, fit, parts) for profiles split at ``bounds``; None when a part is too small to keep."""
        edges = [None, *bounds, None]
        vals, total = self.split.values if self.split else None, self.counts.sum()
        parts, memory, fit = [], 0.0, 0.0
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            mask = np.ones(len(self.counts), bool)
            if lo is not None:
                mask &= vals > lo
            if hi is not None:
                mask &= vals <= hi
            share = self.counts[mask].sum() / total
            if not mask.any() or (len(bounds) and share < self.c.min_share):
                return None
            r = self.ranges(mask, lo, hi)
            memory += share * self.memory(self.input_shapes({k: v[2] for k, v in r.items()}, self.ranks))
            fit += self._fit(mask, r)
            parts.append((mask, r))
        return memory, fit, parts

    def candidates(self, k: int) -> list[list[int]]:
        """Every way to place k-1 boundaries on bucket edges of the split axis."""
        if k == 1:
            return [[]]
        if self.split is None:
            return []
        g, v = self.c.granularity, self.split.values
        edges = range(int(_bucket_up(int(v.min()), g)), int(v.max()), g)
        return [list(b) for b in combinations(edges, k - 1)]


def derive_profiles(table: ShapeTable, c: Constraints = Constraints(), memory: MemoryModel | None = None) -> Derivation:
    """Choose 1..max_profiles profiles for the traffic in ``table``."""
    keep, rejected = _within_caps(table, c)
    if not keep.any():
        raise UserInputError("every logged shape exceeds the caps; raise --cap/--max-batch or check the log")
    sub = ShapeTable(table.columns, table.rows[keep], table.counts[keep])
    search = _Search(sub, c, memory)
    one = search.score([])
    best, alternatives = one, [{"profiles": 1, "score": round(float(_score(one, one)), 4)}]
    for k in range(2, c.max_profiles + 1):
        scored = [s for b in search.candidates(k) if (s := search.score(b)) is not None]
        if not scored:
            break
        cand = min(scored, key=lambda s: _score(s, one))
        alternatives.append({"profiles": k, "score": round(float(_score(cand, one)), 4)})
        if _score(cand, one) > (1 - c.min_gain) * _score(best, one):
            break
        best = cand
    profiles = [_derived(search, mask, r, memory) for mask, r in best[2]]
    return Derivation(profiles, table.records, rejected, search.split.name if search.split and len(profiles) > 1
                      else None, _buckets(search), alternatives)


def _score(s, one) -> float:
    """Relative activation memory (1.0 = one profile) plus mean |log2(shape / opt)| summed over axes."""
    return s[0] / max(one[0], 1e-12) + s[1]


def _within_caps(table: ShapeTable, c: Constraints) -> tuple[np.ndarray, int]:
    keep = np.ones(len(table.rows), bool)
    for i, col in enumerate(table.columns):
        if col in c.caps:
            keep &= table.rows[:, i] <= c.caps[col]
        if c.max_batch and col[1] == 0:
            keep &= table.rows[:, i] <= c.max_batch
    unknown = set(c.caps) - set(table.columns)
    if unknown:
        raise UserInputError(f"--cap names {sorted(unknown)}, which the log does not have; its dims are "
                             f"{[f'{n}:{d}' for n, d in table.columns]}")
    return keep, int(table.counts[~keep].sum())


def _buckets(search: _Search) -> dict[str, list[int]]:
    per_col = {col: (search.c.granularity if a.kind == "dynamic" else 1) for a in search.axes for col in a.columns}
    names = dict.fromkeys(n for n, _ in per_col)
    return {n: [per_col[(n, d)] for d in range(sum(1 for m, _ in per_col if m == n))] for n in names}


def _derived(search: _Search, mask: np.ndarray, r: dict, memory: MemoryModel | None) -> DerivedProfile:
    inputs: dict[str, list[list[int]]] = {}
    for a in search.axes:
        for name, dim in a.columns:
            inputs.setdefault(name, [[0, 0, 0] for _ in range(search.ranks[name])])[dim] = list(r[a.name])
    profile = Profile({n: InputRange(min=[d[0] for d in dims], opt=[d[1] for d in dims], max=[d[2] for d in dims])
                       for n, dims in inputs.items()})
    w = search.counts[mask]
    used, padded = np.ones(len(w)), np.ones(len(w))
    for a in search.axes:
        if a.kind == "dynamic":
            v = a.values[mask]
            used *= v
            padded *= np.clip(_bucket_up(v, search.c.granularity), r[a.name][0], r[a.name][2])
    overhead = float((padded * w).sum() / max((used * w).sum(), 1) - 1)
    max_shapes = {n: rng.max for n, rng in profile.root.items()}
    return DerivedProfile(profile, float(w.sum() / search.counts.sum()), overhead, {k: v[2] for k, v in r.items()},
                          int(memory(max_shapes)) if memory else None)


def onnx_activation_bytes(model_path) -> MemoryModel:
    """An activation-memory estimator for the ONNX at ``model_path``.

    At given input shapes it sums every intermediate tensor whose shape ONNX shape inference can determine: an upper
    bound before TensorRT's fusion and memory reuse (real engines need less; the GPU worker reads the real figure).
    """
    import onnx
    from onnx import helper, shape_inference

    model = load_model(model_path)
    cache: dict[tuple, float] = {}

    def estimate(shapes: dict[str, list[int]]) -> float:
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        if key not in cache:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            for inp in m.graph.input:
                if inp.name in shapes:
                    for dim, size in zip(inp.type.tensor_type.shape.dim, shapes[inp.name], strict=True):
                        dim.dim_value = size
            inferred = shape_inference.infer_shapes(m, data_prop=True)
            total = 0
            for vi in [*inferred.graph.value_info, *inferred.graph.output]:
                t = vi.type.tensor_type
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
                if t.HasField("shape") and -1 not in dims:
                    total += int(np.prod(dims)) * helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
            cache[key] = float(total)
        return cache[key]

    return estimate


def derivation_file(d: Derivation, source: str) -> ProfilesFile:
    """The profiles YAML document for a derivation, with its report."""
    report = {
        "source": source, "records": d.records, "rejected_beyond_caps": d.rejected, "split_axis": d.split_axis,
        "profiles": [{"share": round(p.share, 5), "padding_overhead": round(p.padding_overhead, 4),
                      "max_shape": p.max_shape, "activation_bytes_estimate": p.activation_bytes,
                      "activation_bytes_engine": "pending: get_device_memory_size_for_profile_v2 on the target GPU"}
                     for p in d.profiles],
        "alternatives": d.alternatives,
    }
    return ProfilesFile(profiles=[p.profile for p in d.profiles], buckets=d.buckets, report=report)


def write_profiles_file(doc: ProfilesFile, path: Path) -> None:
    """Write the YAML atomically (a temporary beside it, then rename): a failed run leaves no half file."""
    body = {"profiles": [{n: r.text() for n, r in p.root.items()} for p in doc.profiles], "buckets": doc.buckets,
            "report": doc.report}
    header = ("# Optimization profiles derived by `trtfarm profiles derive` (trtfarm/profiles/derive.py).\n"
              "# Use with `trtfarm build MODEL --profiles THIS_FILE`, or `profiles: THIS_FILE` in farm.yaml.\n"
              "# buckets: the router's padding granularity per input dimension (trtfarm.runtime.Router).\n")
    text = header + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=110)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def parse_cap(text: str) -> tuple[Column, int]:
    """``input_ids:1=512`` -> ((``input_ids``, 1), 512)."""
    m = re.fullmatch(r"([^:=\s]+):(\d+)=(\d+)", text.strip())
    if not m:
        raise UserInputError(f"--cap {text!r}: write INPUT:DIM=N, e.g. input_ids:1=512")
    return (m.group(1), int(m.group(2))), int(m.group(3))
