"""The ``promote-candidates`` flow: move stable to every candidate whose gates hold, report the rest.

The gates are the core's (``releases/gates.py``: accuracy, engine check, latency, canary receipts, each target's
``release_on`` from the fleet) and so is the move (``executor.promote``, signed with the key a worker signs its
builds with); a promotion that lost a race to another writer is a row of the report, not a failed run. The report is
one markdown artifact: a row per candidate with its verdict and gates.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from trtfarm.executor import PromotionResult, promote
from trtfarm.layout import short_ref
from trtfarm.planning.requests import PromoteRequest
from trtfarm.project.fleet_file import load_fleet, signing_settings
from trtfarm.releases.gates import candidate_models, candidates
from trtfarm.releases.moves import move_keys
from trtfarm.store import open_store
from trtfarm.vocabulary.fleet import select_targets

ARTIFACT = "promote-candidates"  # the report's key: each run adds a version the UI lists under it


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report_markdown(rows: list[PromotionResult]) -> str:
    """The run's report: one row per candidate (model, target, candidate, stable, verdict, gates)."""
    if not rows:
        return "No candidates: no model's farm.yaml declares `promotion:`, or nothing was built since."
    lines = ["| model | target | candidate | stable | verdict | gates |", "|---|---|---|---|---|---|"]
    for r in rows:
        c = r.candidate
        gates = "<br>".join(f"{g.name} {g.verdict}: {g.detail}" for g in c.gates)
        if r.refused:
            gates += f"<br>refused: {r.refused}"
        stable = short_ref(c.stable.manifest).split("/")[-1] if c.stable else "nothing"
        cells = [c.name.model, f"{c.name.gpu} {c.name.toolchain}", short_ref(c.pointer.manifest).split("/")[-1],
                 stable, f"**{r.action}**", gates]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    moved = sum(1 for r in rows if r.moved)
    return f"{moved} of {len(rows)} candidate(s) promoted.\n\n" + "\n".join(lines)


@flow(name="promote-candidates")
def promote_candidates(request: PromoteRequest) -> list[dict]:
    """Promote each candidate whose gates hold; returns one ``promote --json`` row per candidate."""
    fleet = load_fleet(request.targets_file)
    release_on = {(t.gpu_key, t.toolchain_label): t.release_on for t in select_targets(fleet, None)}
    trust, signer = move_keys(signing_settings(request.targets_file, fleet=fleet))
    store = open_store(request.store)
    models = request.models or candidate_models(store)
    by = f"promote-candidates run {flow_run.get_id() or 'local'}"
    rows: list[PromotionResult] = []
    for model in models:
        found = [c for c in candidates(store, model, release_on) if (c.name.gpu, c.name.toolchain) in release_on]
        rows += promote(store, found, reason="promoted: every gate holds", by=by, signer=signer, trust=trust)
    logger = get_run_logger()
    for r in rows:
        logger.info("%s %s: %s%s", r.action, r.candidate.pointer.identity, short_ref(r.candidate.pointer.manifest),
                    f" ({r.refused})" if r.refused else "")
    create_markdown_artifact(report_markdown(rows), key=ARTIFACT,
                             description=f"{sum(1 for r in rows if r.moved)} of {len(rows)} candidate(s) promoted")
    return [r.to_json() for r in rows]
