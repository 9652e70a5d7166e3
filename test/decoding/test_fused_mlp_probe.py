"""The fused-MLP probe's kernels (tools/probes/fused_mlp.py: gate/up with SiLU and 1 x 128 block
quantisation, the down product with block scales) against their torch twins under Triton's interpreter, in
fp32 (the interpreter's bf16 and e4m3 casts truncate; bf16 is checked where the probe runs, on a GPU)."""

from __future__ import annotations

from pathlib import Path

from interpreted import run_interpreted

PROBES = Path(__file__).resolve().parents[2] / "tools" / "probes"


def test_the_fused_mlp_probes_kernels_are_their_twins() -> None:
    run_interpreted(
        f"import sys; sys.path.insert(0, {str(PROBES)!r}); import fused_mlp; print(fused_mlp.check())"
    )
