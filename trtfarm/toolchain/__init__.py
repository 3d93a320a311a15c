"""The TensorRT-family seam: build, header, flavour import. Everything that calls libnvinfer lives here."""

from trtfarm.machine.flavour import ToolchainUnavailable, import_flavour, installed_version
from trtfarm.machine.header import PlanHeader, read_plan_header
from trtfarm.toolchain.builder import BuildFailed, BuildProgress, BuildResult, OnnxParseError, plan_from_onnx

__all__ = ["BuildFailed", "BuildProgress", "BuildResult", "OnnxParseError", "PlanHeader", "ToolchainUnavailable",
           "import_flavour", "installed_version", "plan_from_onnx", "read_plan_header"]
