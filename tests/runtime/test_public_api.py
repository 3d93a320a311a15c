"""What the README tells serving code to import works, without pulling a toolchain or Prefect in."""

from __future__ import annotations

import subprocess
import sys


def test_the_documented_runtime_imports_work_and_stay_light():
    code = ("import sys; from trtfarm.runtime import PlanMismatch, Router, load_plan; "
            "from trtfarm.runtime.loader import load_plan as direct; assert load_plan is direct; "
            "print(sorted(m for m in ('tensorrt', 'tensorrt_rtx', 'prefect', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
