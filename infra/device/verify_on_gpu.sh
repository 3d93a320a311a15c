#!/usr/bin/env bash
# Runs on the lent H200: reassemble TensorRT-RTX 1.7.1.116 (cp312), install carried wheels, run trtfarm there.
set -u
R=$PWD; D=/tmp/rtx; mkdir -p $D/tensorrt_rtx_libs /tmp/py
cat /tmp/part1 $R/.devcarry/part2 | xz -d > $D/tensorrt_rtx_libs/libtensorrt_rtx.so.1 || exit 3
xz -dc $R/.devcarry/pkg/parser.xz > $D/tensorrt_rtx_libs/libtensorrt_onnxparser_rtx.so.1
cp $R/.devcarry/pkg/libs_init.py $D/tensorrt_rtx_libs/__init__.py
cp -r $R/.devcarry/pkg/tensorrt_rtx $D/
(cd $D && python3 -m zipfile -e $R/.devcarry/pkg/tensorrt_rtx_cu13_bindings-*.whl .)
python3 -m pip install -q --no-index --no-deps --target /tmp/py $R/.devcarry/pkg/pydantic*.whl \
  $R/.devcarry/pkg/annotated_types*.whl $R/.devcarry/pkg/typing_inspection*.whl $R/.devcarry/pkg/typing_extensions*.whl
export PYTHONPATH=$D:/tmp/py:$R
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv
echo "== import"; python3 -c "import tensorrt_rtx as t; print('tensorrt_rtx', t.__version__)"
echo "== trtfarm targets (this machine)"; python3 -m trtfarm targets --targets-file $R/gpu_targets.yaml --json | python3 -c "import json,sys; print(json.load(sys.stdin)['machine'])"
echo "== trtfarm verify"; COLUMNS=160 python3 -m trtfarm verify $R/.devcarry/plan/enc.plan; echo "exit=$?"
python3 -m trtfarm verify $R/.devcarry/plan/enc.plan --json > $OUT/verify.json
echo "== load_plan"; python3 -c "
from trtfarm.runtime.loader import load_plan, PlanMismatch
try: load_plan('$R/.devcarry/plan/enc.plan')
except PlanMismatch as e: print('PlanMismatch:', e)
"
echo "== runtime alone (skipping trtfarm's own GPU check)"; python3 -c "
from pathlib import Path
from trtfarm.runtime.loader import find_pair, runtime_check
plan, m = find_pair(Path('$R/.devcarry/plan/enc.plan')); print(runtime_check(plan, m))
"
