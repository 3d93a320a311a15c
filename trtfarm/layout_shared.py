"""The store's keys under no model's folder, spelled here and only here, beside ``layout.py`` (its names and roots).

```
timing-caches/<flavour>-<exact_version>/<gpu>-sm<compute_capability>/<cache_flags:12>.cache
runs/<run>/jobs/<job_id>.json
webhook/exports/<claim>.json
status/status.html                       (the fleet's matrix, rewritten by each nightly run)
fleets/<fleet_digest>.json, fleets/current.json   (the fleet each run built for; views on a host without a fleet file)
state-index/<nn>.json                     (the state records of many models in one object, for a cold view on S3)
```
Each is shared by the whole store: a timing cache by every model built with its toolchain on its GPU, a run's job
results by the run's children, a claim by the webhook's deliveries, the page, the fleets and the state index by
every view.
``tests/publishing/test_layout.py`` pins these keys as it pins ``layout.py``'s.
"""

from __future__ import annotations

import re

from trtfarm.errors import UserInputError
from trtfarm.layout import (
    FLEETS,
    RUNS,
    STATE_INDEX,
    STATUS,
    TIMING_CACHES,
    check_name,
    check_segment,
    parse_toolchain_label,
    toolchain_label,
)


def timing_cache_key(flavour: str, exact_version: str, gpu: str, compute_capability: str, flags_digest: str) -> str:
    """``timing-caches/<flavour>-<exact_version>/<gpu>-sm<cc>/<cache_flags:12>.cache``: one per what invalidates one.

    The exact build (``combine`` needs it; never a fleet's label), the GPU and its capability (NVIDIA warns against
    merging caches of different devices), and the digest of the builder flags a cache depends on (TF32, refit, HWC).
    """
    if not isinstance(exact_version, str) or not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", exact_version):
        raise UserInputError(f"timing cache: toolchain version {exact_version!r} is not an exact build "
                             "(major.minor.patch.build, e.g. 11.4.0.106)")
    if not isinstance(compute_capability, str) or not re.fullmatch(r"\d+\.\d+", compute_capability):
        raise UserInputError(f"timing cache: compute capability {compute_capability!r} is not MAJOR.MINOR")
    if not isinstance(flags_digest, str) or not re.fullmatch(r"[0-9a-f]{12,64}", flags_digest):
        raise UserInputError(f"timing cache: flags digest {flags_digest!r} is not a hex digest")
    toolchain = check_segment("toolchain", toolchain_label(flavour, exact_version))
    return (f"{TIMING_CACHES}/{toolchain}/{check_name('GPU', gpu)}-sm{compute_capability.replace('.', '')}/"
            f"{flags_digest[:12]}.cache")


def timing_cache_ref(key_or_ref: str) -> str:
    """The key of ``TOOLCHAIN/GPU-SM/FLAGS`` (what ``cache ls`` shows), of a key, or of an older ``TOOLCHAIN/GPU``."""
    if key_or_ref.startswith(f"{TIMING_CACHES}/"):
        return key_or_ref
    parts = key_or_ref.removesuffix(".cache").split("/")
    if len(parts) not in (2, 3):
        raise UserInputError(f"timing cache {key_or_ref!r}: write TOOLCHAIN/GPU-SM/FLAGS as `trtfarm cache ls` "
                             "shows it, e.g. tensorrt-11.4.0.106/h100-sm90/0123456789ab")
    segments = [check_segment("toolchain", parts[0]), *(check_name("timing cache part", p) for p in parts[1:])]
    return f"{TIMING_CACHES}/{'/'.join(segments)}.cache"


def timing_caches_prefix() -> str:
    """``timing-caches/``: what to list for every shared timing cache."""
    return f"{TIMING_CACHES}/"


def timing_cache_label(key: str) -> str:
    """The ``TOOLCHAIN/GPU-SM/FLAGS`` label of a cache key."""
    return key.removeprefix(f"{TIMING_CACHES}/").removesuffix(".cache")


def timing_cache_flavour(key: str) -> str:
    """The toolchain flavour (``tensorrt``) a cache key names."""
    return parse_toolchain_label(timing_cache_label(key).split("/", 1)[0])[0]


def job_result_key(run: str, job_id: str) -> str:
    """``runs/<run>/jobs/<job_id>.json``: what a farm child built, read by its parent."""
    return f"{RUNS}/{check_segment('run', run)}/jobs/{check_segment('job id', job_id)}.json"


def webhook_claim_key(claim_id: str) -> str:
    """``webhook/exports/<claim>.json``: the create-only marker that makes one event per export."""
    return f"webhook/exports/{check_segment('claim', claim_id)}.json"


def status_page_key() -> str:
    """``status/status.html``: the fleet's status page, which each nightly run replaces (compare-and-swap)."""
    return f"{STATUS}/status.html"


def fleet_key(fleet_digest: str) -> str:
    """``fleets/<fleet_digest>.json``: one fleet a run built for, by the sha256 of its canonical JSON."""
    if not re.fullmatch(r"[0-9a-f]{64}", fleet_digest):
        raise UserInputError(f"fleet digest {fleet_digest!r}: expected 64 lowercase hex digits")
    return f"{FLEETS}/{fleet_digest}.json"


def fleet_pointer_key() -> str:
    """``fleets/current.json``: which recorded fleet the store's newest run built for."""
    return f"{FLEETS}/current.json"


def state_index_key(shard: int) -> str:
    """``state-index/<nn>.json``: one shard of the state records' index (``state/record_index.py``)."""
    if not isinstance(shard, int) or not 0 <= shard < 100:
        raise UserInputError(f"state index: shard {shard!r} is not a number from 0 to 99")
    return f"{STATE_INDEX}/{shard:02d}.json"


def state_index_prefix() -> str:
    """``state-index/``: what to list for the state index's shards."""
    return f"{STATE_INDEX}/"
