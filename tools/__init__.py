"""Developer tools of the trtfarm repository: used by its tests and benchmarks, never shipped in the wheel."""
