"""Run a script of Triton kernels under Triton's interpreter, on CPU tensors, in a process of its own.

Triton reads ``TRITON_INTERPRET`` when it is imported, so the interpreted kernels cannot share the test
process (which may have imported Triton already). Triton comes from requirements/dev.txt; where it is absent
the test is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_interpreted(script: str) -> None:
    """Run ``script`` with ``TRITON_INTERPRET=1``; fail the test with its stderr if it fails."""
    pytest.importorskip("triton")
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
