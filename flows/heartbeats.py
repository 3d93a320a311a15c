"""Lost hosts: Prefect's flow-run heartbeats, the automation that crashes a run whose heartbeats stop, and the reasons.

A farm run may lose the machine under it: a spot reclaim, a power cut, a network partition. Nothing is left on that
machine to report the run, so Prefect keeps it Running for ever. Prefect's own answer (its "detect zombie flows"
guide) is what trtfarm deploys: every deployment's runs emit ``prefect.flow-run.heartbeat`` events every
``HEARTBEAT_S`` seconds (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` in prefect.yaml's job variables; 30 s is Prefect's
minimum), and a proactive automation on the server sets a trtfarm run Crashed when ``LOST_AFTER_S`` pass after a
heartbeat with neither another heartbeat nor a final state. The window also opens when the run turns Running: a host
lost before its first heartbeat reached the server would otherwise never be seen. ``trtfarm farm deploy`` creates it
(``sync_automation``).
A lost host is so seen 60-95 s after the loss (the server checks every 5 s); the parent, waiting on the child's
state by events, resubmits it at once (flows/dispatch.py).

A termination notice (SIGTERM: a spot reclaim, ``docker stop``, ``kubectl drain``) needs no heartbeat: the child
stops its build and ends Crashed with ``NOTICE`` in its message (flows/build_target.py), and the parent resubmits it
at once. Each of these crashes carries its own Prefect state name (``HOST_LOST``, ``TERMINATION_NOTICE``,
``ORPHANED_NAME``; the type stays CRASHED), and ``loss_of`` reads the kind of loss the parent reports from the state's
type and name: the message is for people only.
"""

from __future__ import annotations

from datetime import timedelta

HEARTBEAT_S = 30  # PREFECT_FLOWS_HEARTBEAT_FREQUENCY of every trtfarm deployment (prefect.yaml): Prefect's minimum
LOST_AFTER_S = 3 * HEARTBEAT_S  # three heartbeats missed: the host is gone
AUTOMATION = "trtfarm: crash runs whose host is lost"
TAG = "trtfarm"  # every deployment in prefect.yaml carries it, and so every run they start
LOST = (f"no heartbeat for {LOST_AFTER_S} s: the host running it was lost (powered off, reclaimed or cut off from "
        "the Prefect server); trtfarm resubmits the build")
NOTICE = "termination notice (SIGTERM)"
ORPHANED = "the worker that took it is gone"  # flows/pending.py's message for a child left Pending
# the state names of the three crashes trtfarm knows, and the loss each is (loss_of); every one is of type CRASHED
HOST_LOST, TERMINATION_NOTICE, ORPHANED_NAME = "HostLost", "TerminationNotice", "Orphaned"
KINDS = {HOST_LOST: "host lost", TERMINATION_NOTICE: "notice", ORPHANED_NAME: "orphaned"}
# Prefect names a state-change event by the state's name (prefect.flow-run.<name>): the final states a trtfarm run
# may end in, Prefect's and trtfarm's own crashes, each of which closes the automation's window
FINAL_NAMES = ("Completed", "Failed", "Cancelled", "Crashed", *KINDS)


def lost_host_automation():
    """The automation ``trtfarm farm deploy`` puts on the server (Prefect's zombie-run recipe, for trtfarm's runs)."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return AutomationCore(
        name=AUTOMATION, enabled=True,
        description=(f"Sets a trtfarm flow run Crashed when {LOST_AFTER_S} s pass after it turned Running or sent a "
                     "heartbeat with no heartbeat and no final state: its host is gone. The parent build-matrix run "
                     "resubmits it."),
        trigger=EventTrigger(
            after={"prefect.flow-run.Running", "prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{end}" for end in FINAL_NAMES)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "tag",
                                                 "prefect.resource.id": f"prefect.tag.{TAG}"}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=LOST_AFTER_S)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, name=HOST_LOST, message=LOST)])


async def sync_automation(client) -> str:
    """Create the lost-host automation, or bring the server's copy back to ours; returns what was done."""
    want = lost_host_automation()
    found = await client.read_automations_by_name(AUTOMATION)
    if not found:
        await client.create_automation(want)
        return "created"
    have = found[0]
    fields = ("description", "enabled", "trigger", "actions")
    if all(_same(getattr(have, f), getattr(want, f)) for f in fields):
        return "up to date"
    await client.update_automation(have.id, want)
    return "updated"


def _same(a, b) -> bool:
    def dump(x):
        if isinstance(x, list):
            return [dump(i) for i in x]
        return x.model_dump(mode="json", exclude={"id"}) if hasattr(x, "model_dump") else x

    return dump(a) == dump(b)


async def detection_off(client) -> str | None:
    """Why lost hosts would go unseen on this server (no automation, or a disabled one); None when it is on."""
    found = await client.read_automations_by_name(AUTOMATION)
    if not found:
        return (f"the automation {AUTOMATION!r} is not on the Prefect server, so a child whose host is lost stays "
                "Running until child_timeout_s: run `trtfarm farm deploy`")
    if not found[0].enabled:
        return f"the automation {AUTOMATION!r} is disabled on the Prefect server: enable it in the UI (Automations)"
    return None


def loss_of(state) -> str:
    """What a crashed child's state says happened: ``host lost``, ``notice``, ``orphaned`` or ``crashed``.

    Read from the state's type and name (``KINDS``); its message, for people, plays no part.
    """
    from prefect.client.schemas.objects import StateType

    return KINDS.get(state.name, "crashed") if state.type == StateType.CRASHED else "crashed"


async def worker_of(client, flow_run_id, wait_s: float = 10) -> str:
    """The name of the worker that took a flow run (its ``prefect.worker.submitted-flow-run`` event); "" if unknown.

    The server stores events a moment after they are sent: a run that just ended may not show its event yet, so it
    is asked again for up to ``wait_s`` seconds.
    """
    import asyncio
    import time

    from prefect.events.filters import EventFilter, EventNameFilter, EventRelatedFilter

    query = EventFilter(event=EventNameFilter(name=["prefect.worker.submitted-flow-run"]),
                        related=EventRelatedFilter(id=[f"prefect.flow-run.{flow_run_id}"]))
    deadline = time.monotonic() + wait_s
    while True:
        page = await client.read_events(query, limit=1)
        name = next((e.resource.get("prefect.resource.name") or "" for e in page.events), "")
        if name or time.monotonic() >= deadline:
            return name
        await asyncio.sleep(0.5)
