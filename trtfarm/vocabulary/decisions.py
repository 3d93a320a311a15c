"""What planning decides for the targets it finds published: release one, withdraw a damaged one.

Planning reads the store and writes nothing; these are its decisions about what it found (beside the build jobs it
decides). ``trtfarm.executor`` carries them out, in ``trtfarm build``'s process and in the farm's build-matrix flow
alike. A dry run or the farm's up-to-date check prints them without acting.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.pointer import SeenPointer
from trtfarm.vocabulary.promotion import Promotion


@dataclass(frozen=True)
class Release:
    """Release this published manifest (policy permitting) from the pointer as planning read it.

    ``pointer`` carries its ETag, where the compare-and-swap starts (None: damaged, so the release repairs it
    first). ``trial`` names why the pointer stays (a trial build): carrying it out moves nothing.
    """

    target: str
    manifest_key: str
    manifest: Manifest
    release_on: str
    pointer: SeenPointer | None
    trial: str | None = None
    promotion: Promotion | None = None  # the model's promotion: policy: the release goes to the candidate channel

    def describe(self) -> str:
        """One line for a person: what carrying this out would do."""
        if self.trial:
            return f"keep {self.manifest.target.gpu}'s pointer ({self.trial})"
        return f"release {self.manifest_key}" + (" to candidate (promotion: declared)" if self.promotion else "")


@dataclass(frozen=True)
class Withdraw:
    """Withdraw a damaged publish (its manifest, attestations and plan under ``prefix``) before its rebuild.

    ``why`` says what planning found.
    """

    target: str
    prefix: str
    why: str

    def describe(self) -> str:
        """One line for a person: what carrying this out would do."""
        return f"withdraw {self.prefix} ({self.why})"
