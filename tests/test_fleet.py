"""gpu_targets.yaml: the schema, target resolution, compatibility classes, and errors that point at the line."""

from __future__ import annotations

import pytest

from trtfarm.errors import ConfigError, UserInputError
from trtfarm.project.fleet_file import load_fleet
from trtfarm.vocabulary.fleet import select_targets

from .conftest import REPO, RTX_FLEET


def write(tmp_path, text):
    p = tmp_path / "gpu_targets.yaml"
    p.write_text(text)
    return p


def test_repository_fleet_has_datacenter_and_rtx_targets():
    fleet = load_fleet(REPO / "gpu_targets.yaml")
    flavours = {(t.toolchain.flavour.value, t.toolchain.version) for t in select_targets(fleet)}
    assert ("tensorrt", "11.4.0.106") in flavours and ("tensorrt", "10.16.1.11") in flavours
    assert ("tensorrt_rtx", "1.7.1.116") in flavours


def test_rtx_targets_share_one_portable_class_and_trt_targets_key_on_the_gpu(tmp_path):
    targets = {t.id: t for t in select_targets(load_fleet(write(tmp_path, RTX_FLEET)))}
    assert targets["rtx-4090-rtx1.7"].compat_class == targets["rtx-5090-rtx1.7"].compat_class == "rtx-portable"
    assert targets["h100-trt11.4"].compat_class == "h100"
    assert targets["rtx3090-rtx1.7-o5"].settings.optimization_level == 5
    assert targets["rtx-4090-rtx1.7"].settings.optimization_level == 3


def test_same_compute_capability_puts_h100_and_h200_in_one_class(tmp_path):
    text = RTX_FLEET.replace("targets:\n", """\
  h200: {nvml_name: "NVIDIA H200", compute_capability: "9.0", memory_gib: 141, pool: gpu-h200}
targets:
  - {id: h200-trt11.4, gpu: h200, toolchain: trt-11.4, settings: {hardware_compatibility: same_compute_capability}}
  - {id: h100-sm90, gpu: h100, toolchain: trt-11.4, settings: {hardware_compatibility: same_compute_capability}}
""").replace("  - {id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}\n", "")
    targets = {t.id: t for t in select_targets(load_fleet(write(tmp_path, text)))}
    assert targets["h200-trt11.4"].compat_class == targets["h100-sm90"].compat_class == "sm90"


@pytest.mark.parametrize("mutate, line, words", [
    (lambda t: t.replace("memory_gib: 24, pool: rtx-4090}", "memory_gib: 24, pool: rtx-4090, colour: red}"),
     6, ["gpus.rtx-4090.colour", "unknown key"]),
    (lambda t: t.replace("{id: rtx-5090-rtx1.7,", "{id: rtx-4090-rtx1.7,"), 12, ["duplicate target id"]),
    (lambda t: t.replace("{id: rtx-5090-rtx1.7, gpu: rtx-5090,", "{id: x, gpu: rtx-5080,"), 12,
     ["unknown GPU 'rtx-5080'", "declare it under gpus"]),
    (lambda t: t.replace("{id: rtx3090-rtx1.7-o5, gpu: rtx-3090,", "{id: dup, gpu: rtx-4090,"), 13,
     ["same GPU and toolchain", "remove one"]),
    (lambda t: t.replace("gpus:\n", "gpus:\n  - just-a-name\n").split("  rtx-4090:")[0] + "targets: []\n", 6,
     ["gpus", "dictionary"]),
    (lambda t: t.replace('compute_capability: "8.9", memory_gib: 24', 'compute_capability: "eight", memory_gib: 24'),
     6, ["compute_capability", "pattern"]),
    (lambda t: t.replace('"1.7.1.116"}', '"1.7.1.116"'), 4, ["not valid YAML"]),
])
def test_malformed_fleet_names_file_line_and_fix(tmp_path, mutate, line, words):
    path = write(tmp_path, mutate(RTX_FLEET))
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg, msg
    for w in words:
        assert w in msg, msg


def test_rtx_toolchain_on_a_hopper_gpu_is_refused_with_the_reason(tmp_path):
    path = write(tmp_path, RTX_FLEET.replace("{id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}",
                                             "{id: h100-rtx, gpu: h100, toolchain: rtx-1.7}"))
    with pytest.raises(ConfigError, match=r"compute capability 9.0.*use a tensorrt toolchain"):
        load_fleet(path)


def test_unknown_target_id_lists_the_known_ones(tmp_path):
    with pytest.raises(UserInputError, match="unknown target.*rtx-5090-rtx1.7"):
        select_targets(load_fleet(write(tmp_path, RTX_FLEET)), ["nope"])
