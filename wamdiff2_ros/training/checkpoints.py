"""Resumable training checkpoints: the project's model folder plus optimizer state, step and stage config.

A checkpoint folder is what ``model/checkpoint.py`` writes (config.json, model.safetensors, manifest,
tokenizer), so every checkpoint loads straight into the decoders, plus
``training_state/optimizer.safetensors`` (AdamW moments, no pickle), ``trainer_state.json`` (phase, step,
block size) and ``train_config.yaml`` (the config that made it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.errors import CheckpointError
from wamdiff2_ros.model.checkpoint import save_checkpoint
from wamdiff2_ros.training.config import TrainConfig, dump_config

# In a subfolder: model/checkpoint.py treats every top-level *.safetensors file as model weights.
OPTIMIZER = "training_state/optimizer.safetensors"
STATE = "trainer_state.json"
CONFIG = "train_config.yaml"
STEP_PREFIX = "step_"


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    state = optimizer.state_dict()
    tensors = {
        f"{index}.{key}": value.detach().contiguous().cpu()
        for index, slots in state["state"].items()
        for key, value in slots.items()
        if isinstance(value, torch.Tensor)
    }
    groups = [
        {k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in state["param_groups"]
    ]
    return tensors, groups


def save_training_checkpoint(
    folder: Path,
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    config: TrainConfig,
    state: dict,
    optimizer: torch.optim.Optimizer | None = None,
) -> Path:
    """Write a checkpoint atomically (to ``folder.tmp``, then renamed).

    Args:
        folder: destination; replaced if it exists.
        model: the (unwrapped) model.
        tokenizer: saved with the weights so that the folder is self-contained.
        config: the stage config.
        state: JSON-serialisable trainer state (phase, step, block size).
        optimizer: included for resumable checkpoints; ``None`` for final (inference) checkpoints.

    Returns:
        The folder.
    """
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model, tmp, tokenizer, pixels=(config.min_pixels, config.max_pixels))
    dump_config(config, tmp / CONFIG)
    if optimizer is not None:
        tensors, groups = _optimizer_tensors(optimizer)
        (tmp / OPTIMIZER).parent.mkdir()
        save_file(tensors, str(tmp / OPTIMIZER), metadata={"param_groups": json.dumps(groups)})
    (tmp / STATE).write_text(json.dumps(state, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def load_optimizer_state(folder: Path, optimizer: torch.optim.Optimizer) -> None:
    """Restore AdamW moments and hyperparameters saved by ``save_training_checkpoint``.

    Raises:
        CheckpointError: the file is missing or does not match the optimizer's parameters.
    """
    path = folder / OPTIMIZER
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {folder} is not a resumable checkpoint")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as reader:
        groups = json.loads(reader.metadata()["param_groups"])
    tensors = load_file(str(path))
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        index, key = name.split(".", 1)
        slots.setdefault(int(index), {})[key] = tensor
    try:
        optimizer.load_state_dict({"state": slots, "param_groups": groups})
    except (ValueError, KeyError) as error:
        raise CheckpointError(f"{path} does not match the optimizer: {error}") from error


def read_state(folder: Path) -> dict:
    """The trainer state of a checkpoint folder."""
    try:
        return json.loads((folder / STATE).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{folder / STATE} is unreadable: {error}") from error


def step_folder(phase_dir: Path, step: int) -> Path:
    """Folder of the resumable checkpoint after optimizer step ``step``."""
    return phase_dir / f"{STEP_PREFIX}{step:07d}"


def latest_step_folder(phase_dir: Path) -> Path | None:
    """The newest complete resumable checkpoint of a phase, or None."""
    folders = sorted(
        p for p in phase_dir.glob(f"{STEP_PREFIX}*") if p.is_dir() and not p.name.endswith(".tmp")
    )
    return folders[-1] if folders else None


def prune_step_folders(phase_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` resumable checkpoints of a phase."""
    folders = sorted(
        p for p in phase_dir.glob(f"{STEP_PREFIX}*") if p.is_dir() and not p.name.endswith(".tmp")
    )
    for old in folders[:-keep]:
        shutil.rmtree(old)
