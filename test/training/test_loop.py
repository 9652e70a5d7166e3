"""Loop pieces: the learning-rate schedule, the optimizer's groups and how ranks split the data."""

from __future__ import annotations

import itertools

import pytest
import torch

from wamdiff2_ros.training.config import TrainConfig
from wamdiff2_ros.training.data import Record
from wamdiff2_ros.training.loop import BatchStream, Runtime, host_threads, lr_scale, make_optimizer
from wamdiff2_ros.training.stages import phases


def test_lr_warms_up_from_a_tenth_then_decays_to_a_hundredth():
    assert lr_scale(0, 100, 10) == pytest.approx(0.1)
    assert lr_scale(10, 100, 10) == pytest.approx(1.0)
    assert lr_scale(100, 100, 10) == pytest.approx(0.01)
    scales = [lr_scale(s, 100, 10) for s in range(10, 101)]
    assert all(a >= b for a, b in itertools.pairwise(scales))


def test_optimizer_uses_the_three_learning_rates_and_no_decay_on_norms(tiny_model):
    config = TrainConfig(
        stage="adapt", model="tiny", out_dir="x", data={"qa": "q.json"}, lr=1.0, merger_lr=2.0, visual_lr=3.0
    )
    optimizer = make_optimizer(tiny_model, config)
    lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    named = dict(tiny_model.named_parameters())
    assert lr_of[id(named["model.language_model.layers.0.mlp.up_proj.weight"])] == 1.0
    assert lr_of[id(named["model.visual.merger.linear_fc1.weight"])] == 2.0
    assert lr_of[id(named["model.visual.blocks.0.mlp.linear_fc1.weight"])] == 3.0
    assert decay_of[id(named["model.language_model.norm.weight"])] == 0.0
    assert len(lr_of) == len(named)  # every parameter is trained (the reference freezes nothing)


def test_a_cuda_run_takes_the_cores_the_loader_leaves_and_a_cpu_run_keeps_torchs_threads():
    def config(**keys) -> TrainConfig:
        return TrainConfig(stage="adapt", model="tiny", out_dir="x", data={"qa": "q.json"}, **keys)

    assert host_threads(config(num_workers=14), "cuda", 16) == 2
    assert host_threads(config(num_workers=20), "cuda", 16) == 1
    assert host_threads(config(num_workers=14, host_threads=8), "cuda", 16) == 8
    assert host_threads(config(num_workers=14), "cpu", 16) is None


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_read_disjoint_records_covering_each_epoch(world_size):
    records = [Record(str(i), "qa", None, "q", "a") for i in range(12)]
    config = TrainConfig(
        stage="adapt",
        model="tiny",
        out_dir="x",
        data={"qa": "q.json"},
        local_batch_size=2,
        global_batch_size=12,
    )
    phase = phases(config)[0]
    streams = [
        BatchStream(records, config, phase, Runtime(r, world_size, torch.device("cpu"))) for r in range(3)
    ]
    read = [i for m in range(6 // world_size) for r in range(world_size) for i in streams[r].micro_batch(m)]
    assert sorted(read) == list(range(12))  # one epoch: every record once, no rank reads another's
