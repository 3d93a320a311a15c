#!/usr/bin/env bash
# GPU identity on a real NVIDIA machine: run from the repository root, with a fresh Python (python3 >= 3.11).
#
#   WHEELS=/path/to/wheels OUT=/path/to/out bash tools/h200_identity.sh
#
# Installs this checkout's base package into a new virtual environment (with the system's packages visible, and
# `pip --no-index --find-links $WHEELS` for the ones missing there: no registry is reachable on the lent machines;
# prepare the wheels elsewhere with `pip download --no-deps --only-binary=:all: --python-version 3.12 ...` for
# pydantic, pydantic-core, annotated-types, typing-inspection, boto3, botocore, s3transfer, jmespath, platformdirs,
# cryptography, cffi, pycparser), then writes into $OUT:
#   nvidia-smi.csv     what nvidia-smi says (name, PCI device id, memory, ECC, MIG, compute capability)
#   nvml-raw.json      the NVML calls trtfarm makes, as NVML answered them (and CUDA's multiprocessor count)
#   detection.json     trtfarm.machine.gpu.scan_gpus() per device
#   targets-builtin.json, targets.json   `trtfarm targets --json`: the built-in fleet, then `trtfarm init`'s
#   worker.json        `trtfarm worker --check-only --json` for the H200 pool and the H100 pool (same cc, other id)
set -u
OUT=${OUT:?set OUT to a folder for the outputs}
WHEELS=${WHEELS:-.whl}
REPO=$PWD
V=$(mktemp -d)/venv
python3 -m venv "$V" || exit 3
# the packages of the python3 we were given (the machine's own: numpy, onnx, pyyaml, typer, rich, nvidia-ml-py ...)
# stay visible, also where that python3 is itself a virtual environment (--system-site-packages would skip them)
python3 -c "import site, sys; print('\n'.join(p for p in sys.path if p.endswith('-packages')))" \
  > "$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-packages.pth"
"$V/bin/python" -m pip install -q --no-index --find-links "$WHEELS" --no-build-isolation -e "$REPO" \
  > "$OUT/install.log" 2>&1 || { echo "install failed:"; tail -20 "$OUT/install.log"; exit 3; }
PY="$V/bin/python"
echo "== installed: $($PY -c 'import trtfarm, pynvml; print("trtfarm", trtfarm.__version__, "from", trtfarm.__file__)')"
nvidia-smi --query-gpu=name,pci.device_id,pci.sub_device_id,memory.total,ecc.mode.current,mig.mode.current,compute_cap,driver_version \
  --format=csv | tee "$OUT/nvidia-smi.csv"
$PY - "$OUT/nvml-raw.json" <<'EOF'
import json, sys
import pynvml
from trtfarm.machine.gpu import cuda_sm_count
pynvml.nvmlInit()
rows = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
    row = {"name": pynvml.nvmlDeviceGetName(h), "pciDeviceId": f"0x{pci.pciDeviceId:08X}",
           "pciSubSystemId": f"0x{pci.pciSubSystemId:08X}", "busId": bus,
           "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
           "cuda_compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
           "cuda_multiprocessor_count": cuda_sm_count(bus)}
    for call in ("nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetAttributes"):
        try:
            got = getattr(pynvml, call)(h)
            row[call] = list(got) if isinstance(got, list) else {f: getattr(got, f) for f, _ in got._fields_}
        except pynvml.NVMLError as err:
            row[call] = f"NVMLError: {err}"
    rows.append(row)
driver = pynvml.nvmlSystemGetDriverVersion()
pynvml.nvmlShutdown()
json.dump({"driver": driver, "devices": rows}, open(sys.argv[1], "w"), indent=2, default=str)
print(json.dumps(rows, indent=2, default=str))
EOF
echo "== detection"
$PY -c "
import json
from trtfarm.machine.gpu import scan_gpus
s = scan_gpus()
doc = {'driver': s.driver, 'reason': s.reason, 'describe': s.describe(), 'devices': [g.identity() for g in s.gpus]}
json.dump(doc, open('$OUT/detection.json', 'w'), indent=2); print(json.dumps(doc, indent=2))"
W=$(mktemp -d); cd "$W" || exit 3
echo "== trtfarm targets (built-in fleet)"
COLUMNS=120 $PY -m trtfarm targets
$PY -m trtfarm targets --json > "$OUT/targets-builtin.json"
$PY -m trtfarm init > "$OUT/init.log" 2>&1  # the template, with this machine's GPU added (its PCI id from NVML)
echo "== trtfarm targets (the gpu_targets.yaml that trtfarm init wrote)"
COLUMNS=120 $PY -m trtfarm targets
$PY -m trtfarm targets --json > "$OUT/targets.json"
for pool in h200 gpu-h100; do
  echo "== trtfarm worker --pool $pool --queue tensorrt-11.4.0.106 --check-only"
  COLUMNS=120 $PY -m trtfarm worker --pool $pool --queue tensorrt-11.4.0.106 --check-only; echo "exit=$?"
  $PY -m trtfarm worker --pool $pool --queue tensorrt-11.4.0.106 --check-only --json > "$W/worker-$pool.json"
done
$PY -c "import json, sys; json.dump({p: json.load(open(f'$W/worker-{p}.json')) for p in ('h200', 'gpu-h100')},
        open('$OUT/worker.json', 'w'), indent=2)"
cp gpu_targets.yaml "$OUT/gpu_targets.yaml"
# everything in one file too (docs/h200-identity.json is this file)
$PY - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
doc = {"nvidia_smi_csv": (out / "nvidia-smi.csv").read_text().splitlines()}
for name in ("nvml-raw", "detection", "targets-builtin", "targets", "worker"):
    doc[name.replace("-", "_")] = json.loads((out / f"{name}.json").read_text())
(out / "h200-identity.json").write_text(json.dumps(doc, indent=2) + "\n")
EOF
