"""Small fleets shared by tests and benchmarks (a module, not a fixture: benchmarks import it too)."""

ONE_RTX_TARGET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
targets:
  - {id: rtx4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""
