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

# three release_on: built targets: rtx4090 and rtx5090 share one build (rtx-portable), rtx3090 (-O5) builds its own
THREE_TARGETS = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
  rtx-3090: {nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx-5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx3090-rtx1.7-o5, gpu: rtx-3090, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 5}}
"""
