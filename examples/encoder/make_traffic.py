"""Write a synthetic request-shape log for the example encoder (the seed article's worked example).

Two regimes, as a search product's encoder sees them. Each record is one batch, padded to its longest request:
- 98% short queries: lengths lognormal around 63 tokens (5..128), batched up to 32 (most batches full).
- 2% long documents: lengths lognormal around 380 tokens (129..512, the hard cap), batched by a token budget of
  8,192 (so at most 16), and rare enough that batches are half full (around 8).
Overall: median length 64, p99 384, cap 512, batches up to 32.

Usage: ``python examples/encoder/make_traffic.py [--records 200000] [--out examples/encoder/shapes.jsonl]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

LONG_SHARE = 0.02


def synthetic_traffic(records: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return (batch, length) arrays of ``records`` batches."""
    rng = np.random.default_rng(seed)
    long = rng.random(records) < LONG_SHARE
    length = np.where(long, rng.lognormal(np.log(380), 0.15, records), rng.lognormal(np.log(63), 0.45, records))
    length = np.where(long, np.clip(length, 129, 512), np.clip(length, 5, 128)).round().astype(np.int64)
    short_batch = np.where(rng.random(records) < 0.7, 32, rng.integers(1, 32, records))
    long_batch = np.clip(rng.lognormal(np.log(8), 0.45, records).round(), 1, 16).astype(np.int64)
    return np.where(long, long_batch, short_batch), length


def write_jsonl(path: Path, batch: np.ndarray, length: np.ndarray) -> None:
    """One ``{"input_ids": [b, s], "attention_mask": [b, s]}`` line per record."""
    with open(path, "w") as f:
        for start in range(0, len(batch), 100_000):
            b, s = batch[start:start + 100_000].tolist(), length[start:start + 100_000].tolist()
            lines = (f'{{"input_ids": [{x}, {y}], "attention_mask": [{x}, {y}]}}\n' for x, y in zip(b, s, strict=True))
            f.write("".join(lines))


def main() -> None:
    """Write the log."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("shapes.jsonl"))
    args = ap.parse_args()
    batch, length = synthetic_traffic(args.records, args.seed)
    write_jsonl(args.out, batch, length)
    print(f"wrote {args.out}: {args.records:,} records, median length {np.median(length):.0f}, "
          f"p99 {np.percentile(length, 99):.0f}, max {length.max()}, max batch {batch.max()}")


if __name__ == "__main__":
    main()
