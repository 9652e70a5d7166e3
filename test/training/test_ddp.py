"""The same entry point under torchrun: two CPU processes (gloo DDP) reach the single-process weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.training.config import load_config
from wamdiff2_ros.training.loop import train

from .test_stages import CONFIG_DIR, overrides

pytestmark = pytest.mark.slow


def test_two_process_ddp_matches_one_process(dataset_dir, tmp_path):
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    # sft masks every answer token, so both runs see identical batches: rank r reads records 2r, 2r + 1
    train(load_config(CONFIG_DIR / "train_sft_tiny.yaml", overrides(dataset_dir, single, "max_steps=2")))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "wamdiff2_ros.cli.main",
        "train",
        "sft",
        "--config",
        str(CONFIG_DIR / "train_sft_tiny.yaml"),
        *overrides(dataset_dir, ddp, "max_steps=2", "local_batch_size=2"),
    ]
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    want = load_checkpoint(Path(single) / "B1" / "final").model.state_dict()
    got = load_checkpoint(Path(ddp) / "B1" / "final").model.state_dict()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
