"""A key given twice is an error naming file, line and key, in every YAML trtfarm reads."""

from __future__ import annotations

import pytest

from trtfarm.errors import ConfigError
from trtfarm.profiles.profile import load_profiles_file
from trtfarm.project.fleet_file import load_fleet
from trtfarm.project.spec_file import spec_for_model
from trtfarm.workers.pools import PoolSpec, deployment_drift
from trtfarm.yamlfile import load_yaml

from .conftest import REPO, RTX_FLEET


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


def _referee(text: str):
    """PyYAML's own Python loader, parsing twice as trtfarm did: the data, or the line its error points at."""
    import yaml

    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
        return "data", yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 - the safe loader, named
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        return "error", mark.line + 1 if mark else None


def _variants(text: str):
    """The text, and copies broken or changed one line at a time: a line gone, an indent, a colon, a quote, a tab."""
    lines = text.splitlines(keepends=True)
    yield text
    for i in range(0, len(lines), max(1, len(lines) // 12)):
        for change in (lambda s: "", lambda s: "  " + s, lambda s: s.replace(":", "", 1),
                       lambda s: s.replace(" ", ' "', 1), lambda s: "\t" + s, lambda s: s.replace("-", "- [", 1)):
            yield "".join(lines[:i] + [change(lines[i])] + lines[i + 1:])


def test_every_yaml_file_of_the_repository_and_broken_copies_read_as_pyyamls_python_loader_reads_them(tmp_path):
    """One parse (libyaml's loader where PyYAML has it) gives the data, or the error's line, of PyYAML's own Python
    loader, on every YAML file the repository holds and on copies broken a line at a time."""
    import yaml

    from trtfarm.yamlfile import LOADER

    files = sorted(p for p in REPO.rglob("*.y*ml") if not {".venv", ".git", "node_modules"} & set(p.parts))
    assert len(files) >= 5
    checked = errors = 0
    for f in files:
        for n, text in enumerate(_variants(f.read_text())):
            path = tmp_path / f"{f.stem}-{n}.yaml"
            path.write_text(text)
            kind, expected = _referee(text)
            try:
                found = ("data", load_yaml(path))
            except ConfigError as refused:
                first = str(refused).split("\n")[0]
                found = ("error", int(first.split(":")[1])) if "not valid YAML" in first else ("dup", first)
            if found[0] == "dup":  # a key given twice: trtfarm refuses what PyYAML would keep silently
                assert kind == "data", (f, n, found)
                continue
            assert repr(found) == repr((kind, expected)), (f, n, text)  # (repr: an alias may make data recursive)
            checked += 1
            errors += kind == "error"
    assert checked > 100 and errors > 20  # the broken copies did break
    assert LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
