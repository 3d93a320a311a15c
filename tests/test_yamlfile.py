"""A key given twice is an error naming file, line and key, in every YAML trtfarm reads."""

from __future__ import annotations

import pytest

from trtfarm.errors import ConfigError
from trtfarm.profiles.profile import load_profiles_file
from trtfarm.vocabulary.buildspec import spec_for_model
from trtfarm.vocabulary.fleet_file import load_fleet
from trtfarm.workers.pools import PoolSpec, deployment_drift
from trtfarm.yamlfile import load_yaml

from .conftest import RTX_FLEET


def test_a_fleet_with_a_key_twice_is_refused_at_the_second_one(tmp_path):
    path = tmp_path / "gpu_targets.yaml"
    path.write_text(RTX_FLEET + "defaults:\n  tf32: true\n  workspace_mib: 4096\n  tf32: false\n")
    line = len(RTX_FLEET.splitlines()) + 4
    with pytest.raises(ConfigError) as refused:
        load_fleet(path)
    assert str(refused.value) == f"{path}:{line}: key 'tf32' is given twice (first on line {line - 2}); keep one"


def test_a_fleet_without_duplicates_still_loads(fleet_file):
    assert len(load_fleet(fleet_file).targets) == 4


def test_farm_yaml_with_a_key_twice_is_refused(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "farm.yaml").write_text("name: encoder\nprecision: fp16\nname: decoder\n")
    with pytest.raises(ConfigError, match=r"farm.yaml:3: key 'name' is given twice \(first on line 1\)"):
        spec_for_model(tmp_path / "model.onnx")


def test_a_profiles_file_with_an_input_twice_in_one_profile_is_refused(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text("profiles:\n  - input_ids: 1x16:16x128:32x512\n    input_ids: 1x8:8x8:8x8\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: key 'input_ids' is given twice"):
        load_profiles_file(path)


def test_prefect_yaml_with_a_key_twice_is_refused_and_merge_keys_are_not_duplicates(tmp_path):
    path = tmp_path / "prefect.yaml"
    base = ("definitions:\n  bt: &bt {entrypoint: flows/build_target.py:build_target}\n"
            "deployments:\n  - {<<: *bt, name: rtx-4090, work_pool: {name: rtx-4090}}\n")
    path.write_text(base)
    assert deployment_drift(path, [PoolSpec("rtx-4090", "process", 1, ("rtx-4090",), "")]) == []
    path.write_text(base + "  - name: a\n    name: b\n")
    with pytest.raises(ConfigError, match=rf"{path}:6: key 'name' is given twice \(first on line 5\)"):
        load_yaml(path)
    nested = tmp_path / "nested.yaml"
    nested.write_text("a:\n  - b: {c: 1, c: 2}\n")
    with pytest.raises(ConfigError, match="nested.yaml:2: key 'c'"):
        load_yaml(nested)
