"""A signed farm store for the release-chain tests: two models, two targets, two releases, real TensorRT-RTX plans.

``enc`` is built and released for the RTX 4090 and the RTX 3090 (another build: optimization level 5) twice (its
v1 at ``T0``, v2 at ``T1``), ``mlp`` once; every plan and release is signed by the workers' key. ``v1`` holds enc's
RTX 4090 pointer as it was after the first release (validly signed, version 1).
"""

from __future__ import annotations

from pathlib import Path

from trtfarm import layout
from trtfarm.signing.keys import PemKeySigner
from trtfarm.store import open_store

from .conftest_builds import publish_export
from .test_signing import RELEASED_FLEET, key_pair

GPU, OTHER_GPU = "rtx-4090", "rtx-3090"
TARGETS = ["rtx-4090-rtx1.7", "rtx3090-rtx1.7-o5"]
T0, T1 = 1_700_000_000, 1_700_100_000
FLEET = RELEASED_FLEET.replace("settings: {optimization_level: 5}}", "settings: {optimization_level: 5}, "
                               "release_on: built}")


def build_farm(root: Path) -> dict:
    """Build the store under ``root``; returns its parts by name."""
    keys = {name: key_pair(root, name) for name in ("worker", "stranger")}
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(FLEET)
    store = open_store((root / "store").as_uri())
    signer = PemKeySigner(keys["worker"][0])
    publish_export(store, fleet, root / "enc0", 0, T0, TARGETS, signer=signer, name="enc")
    v1 = store.get(layout.release_key("enc", GPU, "tensorrt_rtx-1.7.1.116")).data
    publish_export(store, fleet, root / "enc1", 1, T1, TARGETS, signer=signer, name="enc")
    publish_export(store, fleet, root / "mlp", 2, T1, TARGETS, signer=signer, name="mlp")
    return {"root": root, "keys": keys, "fleet": fleet, "v1": v1, "store": store}
