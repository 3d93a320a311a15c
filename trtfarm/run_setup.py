"""One run's setup, read once: the store, the fleet, its resolved targets, the run's key and the exports.

``trtfarm build`` (``pipeline.run_local``) and the build-matrix flow both start with ``setup_run``: it opens the store
and reads the fleet file once per run, and nothing after it reads them again (a farm child gets what it needs in its
``BuildJob``). The two paths also end alike: ``sweep_temporaries`` removes what killed writers of this run's plans
left in the store, and ``note_unsigned`` says which up-to-date plans a signing run leaves unsigned.

Keys: the run's key (the environment's ``TRTFARM_SIGNING_KEY``, else the run's fleet file's ``signing.key``) signs
what the run releases and, in a local build, its builds too. Each job carries the run's key id (``release_key``), so
a farm child's provenance states it beside the key of the worker that signed the build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trtfarm.project.fleet_file import load_fleet, signing_settings
from trtfarm.publishing.registry import latest_exports, resolve_model
from trtfarm.signing.keys import Signer, key_hint
from trtfarm.signing.settings import SigningSettings
from trtfarm.state.fleet_record import record_fleet
from trtfarm.store import Store, is_uri, open_store
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.target_outcome import RunRow

if TYPE_CHECKING:
    from trtfarm.planning.plan import ExportWork
    from trtfarm.planning.requests import MatrixRequest

STALE_TEMP_S = 3600  # an in-flight store write this old belongs to a killed writer (a plan uploads in minutes)


def find_exports(store: Store, model: str | None) -> list[ExportRef]:
    """The exports a run builds: a local ONNX path, the named model or URI, or the latest of every registered one."""
    if model and not is_uri(model) and (Path(model).is_file() or Path(model).suffix == ".onnx"):
        return [ExportRef(str(Path(model)), "")]
    return [resolve_model(store, model)] if model else latest_exports(store)


def signer_id(signer: Signer | None) -> str | None:
    """A signer's key id (the sha256 of its public key, as bundles name it), or None for no signer."""
    return key_hint(signer.public_key_pem) if signer is not None else None


@dataclass(frozen=True)
class RunSetup:
    """What one run reads before it plans: made once by ``setup_run`` and handed to everything after it."""

    request: MatrixRequest
    store: Store
    fleet: Fleet
    targets: list[ResolvedTarget]  # the requested targets (every target when none was named)
    exports: list[ExportRef]
    signing: SigningSettings  # the run's key and trusted keys: the environment's, else the run's fleet file's
    signer: Signer | None = field(default=None, repr=False)

    def record_fleet(self) -> str:
        """Record the fleet this run built for in the store (what views on a host without a fleet file read).

        Called where the run records its models' states: a run that changed something, so a refused run leaves no
        store behind.
        """
        return record_fleet(self.store, self.fleet, str(self.request.targets_file))

    @property
    def key_id(self) -> str | None:
        """The run's key id (what signs its releases), or None when the run signs nothing."""
        return signer_id(self.signer)

    def trusted_keys(self):
        """The keys the run's fleet (or the environment) trusts, or None."""
        return self.signing.trusted_keys()

    def stamped(self, plans: list[ExportWork]) -> list[ExportWork]:
        """``plans`` with every job carrying the run's key id, which each build's provenance states."""
        key = self.key_id
        return [p.model_copy(update={"jobs": [j.model_copy(update={"release_key": key}) for j in p.jobs]})
                if p.jobs else p for p in plans]

    def sweep_temporaries(self, plans: list[ExportWork]) -> None:
        """Remove what killed writers of these plans' builds left in the store (older than ``STALE_TEMP_S``)."""
        for job in (j for p in plans for j in p.jobs):
            for plan in job.plans:
                self.store.sweep_temporaries(plan.prefix, STALE_TEMP_S)

    def note_unsigned(self, rows: list[RunRow]) -> None:
        """Say which up-to-date plans a signing run leaves unsigned (published before the key), and what signs them."""
        if self.signer is None:
            return
        from trtfarm.publishing.attest import read_stored

        for row in rows:
            o = row.outcome
            if o.status == "up-to-date" and o.manifest_key and (stored := read_stored(self.store, o.manifest_key)) \
                    and stored.signature is None:
                o.note("unsigned", "unsigned (published before signing was on): `trtfarm sign` signs it")


def setup_run(request: MatrixRequest) -> RunSetup:
    """Open the store and read the run's fleet file once; a bad key or an unknown target fails before any work."""
    store = open_store(request.store)
    fleet = load_fleet(request.targets_file)
    signing = signing_settings(request.targets_file, fleet=fleet)
    signer = signing.signer()  # a bad key fails the run here, before anything is planned
    targets = select_targets(fleet, request.targets or None)
    return RunSetup(request, store, fleet, targets, find_exports(store, request.model), signing, signer)
