"""Where a small model's training step goes on the GPU (issue 20: the seeing recipe's steps took ~0.27 s).

Generates a small scene set, makes the seeing recipe's initial model, then trains its AR teacher for a few
dozen steps in several configurations (micro-batch size, loader processes, compiled or not) and profiles one
step of each with torch.profiler (CPU and CUDA): the step's wall time against its kernels' time, the
launches and the host syncs. Usage on the device machine, carrying ``train_wheels`` (4-5 minutes with the
machine's start: the compiled variants compile first):
``python3 -m pip install -q --no-index --no-deps --target /tmp/site train_wheels/*.whl &&
PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 python3 tools/probes/train_step.py $OUT/probe [VARIANTS]``
(VARIANTS: names of ``VARIANTS``, comma-separated; default all): it prints each variant's summary as it
finishes and keeps OUT_DIR/train_step.json up to date (DEVICE, a third argument, defaults to cuda; SCENES,
a fourth, is an existing ``sim generate`` folder to train on instead of 1,536 fresh scenes, e.g. a warm
machine's ``runs/<run>/train_scenes``). On a cold machine the data and the initial model take ~45 s and a
variant ~25 s (100 steps, medians of the last 90), a compiled one ~60 s.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import yaml

from wamdiff2_ros.training import loop
from wamdiff2_ros.training.recipe import load_recipe, run_recipe

PROFILED_STEP = 30
VARIANTS = {  # name: keys over the recipe's training block (batches pinned on CUDA since 2026-12-03)
    # (fp32, 256 in one micro-batch, pinned: 0.209 s a step on 2026-12-03; 128: 0.262)
    # bf16 autocast: tensor-core GEMMs and cuDNN's flash attention (in fp32 FFMA and the f32
    # memory-efficient kernel took ~60 % of the step's kernel time on 2026-12-03)
    "micro256_bf16": {"local_batch_size": 256, "num_workers": 14, "autocast_bf16": True},
    # the fourth run's real step was 0.177 s against this probe's 0.108 (2026-12-03), its steps spread from
    # 0.095 to 0.32 s with no data wait: do 14 loader processes (each ~1.5-2.5 s of a core per batch of 256,
    # measured on the development CPU) starve the training process of its cores?
    "micro256_bf16_w8": {"local_batch_size": 256, "num_workers": 8, "autocast_bf16": True},
    # (2026-12-03 on the fourth run's scenes: 0.177 s, w8 0.186, compiled 0.149; kernels 71 / 70 / 38
    # ms: host-bound, with small host ops of 17-22 ms each.) Since then the training process takes the
    # cores the loader leaves (loop.host_threads: 2 of 16 here); this is torch's default of before:
    "micro256_bf16_threads16": {
        "local_batch_size": 256,
        "num_workers": 14,
        "autocast_bf16": True,
        "host_threads": 16,
    },
    # (bf16, two micro-batches of 128: 0.218 s a step on 2026-12-03, before the forward's host waits went)
    # a step of 512 in one micro-batch: is the step's host time fixed per micro-batch?
    "micro512_bf16": {
        "global_batch_size": 512,
        "local_batch_size": 512,
        "num_workers": 14,
        "autocast_bf16": True,
    },
    # TrainConfig.compile: Inductor over the vision pieces and the text layers (fewer, fused kernels)
    "micro256_bf16_compiled": {
        "local_batch_size": 256,
        "num_workers": 14,
        "autocast_bf16": True,
        "compile": True,
    },
}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaEventSynchronize")


def _summary(prof: torch.profiler.profile, wall_s: float) -> dict:
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_us = sum(e.self_device_time_total for e in kernels)
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:15]
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    top_cpu = sorted(cpu, key=lambda e: -e.self_cpu_time_total)[:20]
    runtime = {e.key: e.count for e in events if e.key.startswith("cuda")}
    return {
        "wall_ms": wall_s * 1e3,
        "kernel_ms": kernel_us / 1e3,
        "kernels": sum(e.count for e in kernels),
        "launches": runtime.get("cudaLaunchKernel", 0) + runtime.get("cuLaunchKernel", 0),
        "syncs": {name: runtime.get(name, 0) for name in SYNC_CALLS},
        "top_kernels_ms": {e.key[:90]: round(e.self_device_time_total / 1e3, 3) for e in top},
        # where the host's time goes (self time: a Python-level op's children are not in it)
        "top_cpu_ms": {e.key[:90]: round(e.self_cpu_time_total / 1e3, 3) for e in top_cpu},
        "cpu_ops": sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CPU),
    }


def main(out_dir: Path, only: str = "", device: str = "cuda", scenes: str = "", samples: int = 1536) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    if scenes:  # an existing scene folder (a recipe run's train_scenes) stands for the probe's own
        (out_dir / "run").mkdir(exist_ok=True)
        (out_dir / "run" / "recipe_state.json").write_text(json.dumps({"train_scenes": str(Path(scenes))}))
    unknown = set(only.split(",")) - set(VARIANTS) - {""}
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    names = [n for n in VARIANTS if not only or n in only.split(",")]
    profiles: dict[str, dict] = {}
    original = loop.PhaseTrainer._step

    def profiled(self, step, batches, position):
        self._probe_calls = getattr(self, "_probe_calls", 0) + 1
        if self._probe_calls != PROFILED_STEP:
            return original(self, step, batches, position)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            row = original(self, step, batches, position)
        profiles[str(self.config.out_dir)] = _summary(prof, row["step_s"])
        return row

    loop.PhaseTrainer._step = profiled
    base = yaml.safe_load(Path("config/recipes/seeing_model.yaml").read_text())
    steps = [s for s in base["steps"] if s["name"] in ("init",)]
    teacher = next(s for s in base["steps"] if s["name"] == "teacher")
    teacher = {key: value for key, value in teacher.items() if key != "heldout"}  # no selection scenes here
    recipe = {
        "run_dir": str(out_dir / "run"),
        "device": device,
        "training": {**base["training"], "max_steps": PROFILED_STEP + 70, "ckpt_every_steps": 1000},
        "steps": [
            {"name": "train_scenes", "kind": "generate", "samples": samples, "seed": 4, "width": 256,
             "min_int_digits": 2, "workers": 14},
            *steps,
        ],
    }  # fmt: skip
    result = {}
    # One variant at a time, each result printed and written as it comes: a call cut short keeps the rest
    # (the run folder's finished steps, data and init, are skipped after the first)
    for name in names:
        recipe["steps"].append({**teacher, "name": name, "set": {**teacher["set"], **VARIANTS[name]}})
        path = out_dir / "probe_recipe.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        run_recipe(load_recipe(path))
        lines = (out_dir / "run" / name / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        rows = [r for r in rows if r.get("kind") == "train"][10:]
        profile = next(v for k, v in profiles.items() if k.endswith(name))
        result[name] = {
            "step_s_p50": statistics.median(r["step_s"] for r in rows),
            "data_s_p50": statistics.median(r["data_s"] for r in rows),
            "tokens_p50": statistics.median(r["tokens"] for r in rows),
            "profiled_step": profile,
        }
        print(name, json.dumps(result[name], indent=1), flush=True)
        (out_dir / "train_step.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:5])
