#!/usr/bin/env bash
# Prepare .devcarry/ to run `trtfarm verify` on a lent GPU machine that has no PyPI access (see docs/h200-verify.md).
# Call 1 carries .devcarry/part1 (copy it to /tmp/part1 there); call 2, within 30 s, carries .devcarry/part2,
# .devcarry/pkg and .devcarry/plan and runs `bash .devcarry/pkg/device.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
SP=$(.venv/bin/python -c "import tensorrt_rtx_libs, os; print(os.path.dirname(os.path.dirname(tensorrt_rtx_libs.__file__)))")
PLAN=${1:?usage: prepare_carry.sh PULLED_PLAN (its .manifest.json beside it)}
mkdir -p .devcarry/pkg .devcarry/plan
xz -9e -T2 -c "$SP/tensorrt_rtx_libs/libtensorrt_rtx.so.1" > .devcarry/librtx.xz      # ~65.5 MB, ~2.5 min
(cd .devcarry && split -b 40000000 librtx.xz part && mv partaa part1 && mv partab part2 && rm librtx.xz)
xz -9 -c "$SP/tensorrt_rtx_libs/libtensorrt_onnxparser_rtx.so.1" > .devcarry/pkg/parser.xz
cp "$SP/tensorrt_rtx_libs/__init__.py" .devcarry/pkg/libs_init.py
rm -rf .devcarry/pkg/tensorrt_rtx && cp -r "$SP/tensorrt_rtx" .devcarry/pkg/
.venv/bin/pip download -q -d .devcarry/pkg --no-deps --only-binary :all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  "tensorrt_rtx_cu13_bindings==1.7.1.116" "pydantic==2.14.4" "pydantic-core==2.50.5" annotated-types \
  typing-inspection typing-extensions
cp infra/device/verify_on_gpu.sh .devcarry/pkg/device.sh
cp "$PLAN" "$PLAN.manifest.json" .devcarry/plan/ && mv .devcarry/plan/"$(basename "$PLAN")" .devcarry/plan/enc.plan \
  && mv .devcarry/plan/"$(basename "$PLAN").manifest.json" .devcarry/plan/enc.plan.manifest.json
du -sh .devcarry/*
