"""trtfarm: ONNX exports in, validated TensorRT-family plans out, one per GPU model x toolchain version.

The core library. It never imports an orchestrator: ``tasks/`` and ``flows/`` wrap it for Prefect.
"""

__version__ = "0.1.0"
