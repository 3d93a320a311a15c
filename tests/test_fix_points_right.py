"""A fix names the next right command: a farm.yaml block's own keys, and a trusted key's public half.

An unknown key inside ``promotion:`` (or ``precision:``) lists that block's keys, not farm.yaml's (a required key
missing from a fleet's GPU lists that GPU's keys); a trusted public key that is not there says how its public half
is made from the signing key, never how to make a new private key.
"""

from __future__ import annotations

import pytest

from trtfarm.errors import ConfigError, UserInputError
from trtfarm.project.fleet_file import load_fleet
from trtfarm.project.spec_file import spec_for_model
from trtfarm.signing.keys import load_public_key

from .fleets import ONE_RTX_TARGET


@pytest.mark.parametrize("block, line, keys", [
    ("promotion: {receipts: 2, grace: 0}", "promotion.grace: unknown key. promotion's keys: receipts, soak_s, "
     "latency_budget, on_failed_receipt.", ("name", "profiles")),
    ("precision: {mode: fp16, zzz: 1}", "precision.zzz: unknown key. precision's keys: mode, keep_fp32,",
     ("promotion", "profiles")),
    ("zzz: 1", "zzz: unknown key. Keys: name, precision, calibration, heldout, targets, profiles, promotion.", ()),
])
def test_an_unknown_key_in_a_farm_yaml_block_lists_that_blocks_keys(tmp_path, block, line, keys):
    (tmp_path / "farm.yaml").write_text(f"name: encoder\n{block}\n")
    with pytest.raises(ConfigError) as refused:
        spec_for_model(tmp_path / "model.onnx")
    said = str(refused.value)
    assert said.startswith(f"{tmp_path / 'farm.yaml'}:2: {line}"), said
    assert not any(f" {k}," in said or f" {k}." in said for k in keys), said  # farm.yaml's own keys: not listed


def test_a_missing_key_of_a_block_lists_that_blocks_keys(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET.replace('compute_capability: "8.9", ', ""))
    with pytest.raises(ConfigError) as refused:
        load_fleet(tmp_path / "gpu_targets.yaml")
    said = str(refused.value)
    assert ":5: gpus.rtx-4090.compute_capability: required key is missing. gpus.rtx-4090's keys: nvml_name, " \
           "pci_ids, compute_capability, memory_gib, pool," in said and "toolchains" not in said, said


def test_a_missing_trusted_public_key_says_where_its_public_half_comes_from(tmp_path):
    with pytest.raises(UserInputError) as refused:
        load_public_key(tmp_path / "signing.pub", "TRTFARM_TRUSTED_KEYS")
    said = str(refused.value)
    assert f"cannot read the public key {tmp_path / 'signing.pub'}" in said, said
    assert "openssl ec -in signing.pem -pubout -out signing.pub" in said and "-genkey" not in said, said
