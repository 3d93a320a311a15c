"""Small fleets shared by tests and benchmarks (a module, not a fixture: benchmarks import it too)."""

ONE_RTX_TARGET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""

# one refittable target and one that is not
REFIT_FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-3090: {nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}
targets:
  # REFIT / REFIT_IDENTICAL need a GPU even to build with TensorRT-RTX; REFIT_INDIVIDUAL builds ahead of time
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built, settings: {refit: refit_individual}}
  - {id: rtx3090-rtx1.7, gpu: rtx-3090, toolchain: rtx-1.7, release_on: built}
"""
