"""Reports render for built, failed, skipped and pending targets, and show what changed since the last release."""

from __future__ import annotations

from trtfarm.publishing.manifest import Check
from trtfarm.publishing.publish import publish_plan
from trtfarm.store import open_store
from trtfarm.validation.report import write_report

from ..test_manifest import sample


def publish(store, prefix, target, tmp_path, engine: Check, build_s=1.5):
    plan = tmp_path / f"{target}.plan"
    plan.write_bytes(b"ftrt" + b"\0" * 2000)

    def manifest_for(info):
        m = sample()
        m.target.target_id, m.plan, m.build.wall_s = target, info, build_s
        m.verification.engine = engine
        return m

    return store.url(publish_plan(store, prefix, plan, manifest_for).manifest_key)


def test_report_with_every_status_and_a_flagged_regression(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    validated = Check(status="failed", detail="validated on NVIDIA H100 80GB HBM3: p99 regression", figures={
        "latency": {"0": {"p50": 1.9, "p99": 2.6}}, "accuracy": [{"profile": 0, "point": "opt", "shapes": {},
                                                                 "outputs": {"embeddings": {"cosine_min": 0.99991}}}],
        "regressions": [{"profile": "0", "text": "p99 2.100 -> 2.600 ms (+23.8%, limit +5%) REGRESSION",
                         "regressed": True}],
        "tactic_changes": {"summary": "1 tactic(s) changed, 1 layer(s) fused away"}})
    pending = Check(status="pending", detail="engine: pending on NVIDIA GeForce RTX 4090")
    outcomes = [
        {"target": "h100-trt11.4", "status": "built", "reason": "", "manifest": publish(
            store, "plans/a", "h100-trt11.4", tmp_path, validated)},
        {"target": "rtx4090-rtx1.7", "status": "built", "reason": "", "manifest": publish(
            store, "plans/b", "rtx4090-rtx1.7", tmp_path, pending, 0.4)},
        {"target": "l4-trt11.4", "status": "failed", "reason": "the ONNX parser rejected the model\nmore",
         "manifest": None},
        {"target": "h100-trt10.13", "status": "skipped", "reason": "`tensorrt` is not importable here",
         "manifest": None},
    ]
    path = write_report(store, "encoder", "run-1", outcomes, tmp_path / "out")
    md = path.read_text()
    for text in ("| h100-trt11.4 | built | failed | cos min 0.99991 (engine) | 1.900 | 2.600 |",
                 "⚠️ p99 2.100 -> 2.600 ms (+23.8%, limit +5%) REGRESSION; 1 tactic(s) changed",
                 "| rtx4090-rtx1.7 | built | pending on NVIDIA H100 80GB HBM3", "| l4-trt11.4 | **failed** |",
                 "the ONNX parser rejected the model |", "| h100-trt10.13 | skipped |", "**Regressions: 1**",
                 "![latency](latency.png)", "![build_time](build_time.png)"):
        assert text in md, (text, md)
    for png in ("latency.png", "build_time.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert store.get(f"reports/encoder/run-1/{png}") is not None
    assert store.get("reports/encoder/run-1/report.md").data.decode() == md
