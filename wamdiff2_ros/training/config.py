"""Typed training-stage configs read from YAML, with ``key=value`` overrides checked against the field names.

One dataclass covers the three stages (sft, adapt, distill) so that every key has one meaning everywhere;
stage-specific checks live in ``TrainConfig.__post_init__``. Unknown keys and mistyped values are errors,
never silent defaults. Defaults are the reference's Stage I values (docs/REFERENCE.md §3.1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wamdiff2_ros.decoding import commit_rules
from wamdiff2_ros.errors import InputError

STAGES = ("sft", "adapt", "distill")
TASKS = ("planning", "detection", "qa")
MASK_SCHEDULES = ("stratified", "full")


@dataclass(frozen=True)
class TrainConfig:
    """One training stage.

    Attributes:
        stage: ``sft`` (Stage 0, AR teacher at B = 1), ``adapt`` (Stage I, progressive block sizes) or
            ``distill`` (Stages II and III: teacher and student on the same corrupted sequence).
        model: initial weights: a preset name (tiny, 2b, 8b; random init) or a checkpoint folder.
        out_dir: run folder: checkpoints, metrics.jsonl, loss.png.
        data: task (planning, detection, qa) -> reference-format JSON file.
        task_weights: task -> records drawn per record per epoch (1.0 = each once; 0.5 = half); tasks missing
            here weigh 1.0.
        eval_data: task -> JSON file evaluated at the end of each block-size phase (empty = no evaluation).
        eval_samples: records per task evaluated (0 = all).
        eval_device: where evaluation decodes: ``auto`` (the training device), ``cpu`` or ``cuda``.
        heldout_data: task -> JSON file whose loss (the stage's own, on fixed masks) is logged every
            ``heldout_every_steps`` steps as ``kind: heldout`` rows of metrics.jsonl: the curve that says
            whether the model still generalises (empty = none).
        heldout_every_steps: optimizer steps between held-out losses (0 = never).
        heldout_samples: records of ``heldout_data`` scored each time (the first of each task, in turn).
        block_sizes: B of each phase, in order; each phase starts from the previous one's weights (Stage I's
            1 -> 4 -> 8 -> 16 -> 32 chain is ``[4, 8, 16, 32]`` started from the B = 1 checkpoint).
        mask_schedule: ``stratified``: one mask ratio per response block, t_i = u_i/N + i/N permuted
            (reference collate_fns.py:914-920); ``full``: every answer token masked (t = 1), which at B = 1 is
            teacher-forced AR training without a logit shift (Stage 0).
        clean_sees_noisy: reproduce the reference SFT collator's leak of noisy keys to clean queries (pitfall
            1); off = the modeling file's rules, which match inference.
        teacher: distill only: teacher checkpoint folder (or a preset name, for tests).
        teacher_block_size: block size of the teacher's mask; 0 = B/2, as the reference hard-codes
            (collate_fns.py:1353). Honoured when set (pitfall 2).
        kd_ratio: loss = (1 - kd_ratio) * CE + kd_ratio * JSD (reference 1.0: no CE).
        jsd_beta: mixture weight of the symmetric JSD (reference 0.5).
        temperature: softmax temperature of the JSD; the loss is scaled by temperature^2 (reference 1.0).
        top_k_overlap: k of the teacher/student top-k token overlap metric.
        on_policy: replace a batch's answers by the student's own decode every ``generate_interval`` steps.
        generate_interval: optimizer steps between on-policy regenerations (reference 2).
        generate_steps: denoising steps per block of the on-policy decode (reference 32).
        generate_commit_rule: commit rule of the on-policy decode (reference: static, pitfall 4).
        max_new_tokens: answer budget of on-policy and evaluation decodes.
        epochs: passes over the task mix per phase (used when ``max_steps`` is 0).
        max_steps: optimizer steps per phase; 0 = from ``epochs``.
        max_phase_s: wall-clock budget of a phase in seconds (0 = none). With a budget the learning-rate
            schedule runs on whichever of steps and seconds is further along, and the phase ends (with its
            final checkpoint) when either is used up: a fixed-time GPU call gets a fully annealed model.
        global_batch_size: samples per optimizer step over all ranks (reference 128).
        local_batch_size: samples per forward on one rank; accumulation = global / (local * world).
        lr: AdamW learning rate of the language model (reference 4e-5 Stage I, 5e-6 distill).
        merger_lr: learning rate of the vision merger (projector) (reference = lr).
        visual_lr: learning rate of the vision tower blocks (reference 2e-6).
        weight_decay: AdamW weight decay (reference 0.05 Stage I, 0.0 distill).
        adam_beta1: AdamW beta1 (reference 0.9).
        adam_beta2: AdamW beta2 (reference 0.95).
        warmup_steps_max: warmup is min(this, warmup_fraction * steps) (reference 1000).
        warmup_fraction: see ``warmup_steps_max`` (reference 0.1).
        grad_clip: global gradient-norm clip (reference 1.0).
        max_len: longest [prefix | clean | noisy] sequence; longer samples are an error (reference 8192).
        min_pixels: smallest resized image area (reference 12,544).
        max_pixels: largest resized image area (reference 2,073,600; small for CPU runs).
        dtype: parameter (and optimizer state) dtype, ``fp32`` or ``bf16``.
        autocast_bf16: run forward and backward under bf16 autocast with ``fp32`` parameters: the mixed
            precision of the reference's FSDP2 bf16 (fp32 master weights; bf16 ones drop small updates).
        device: ``cpu``, ``cuda`` or ``auto`` (cuda when available).
        gradient_checkpointing: recompute activations in backward (reference: on, FSDP2).
        compile: run the vision tower's and the text layers' work through Inductor (``forward.py``): fewer,
            fused kernels (a small model's bf16 step on the H200: 49 ms of kernels against 86, the step
            0.104 s against 0.108 while the host bound it); the first steps take the compile time. Not
            with gradient checkpointing, on-policy answers or ``eval_data`` (they decode with the model).
        num_workers: DataLoader processes reading and tokenising records ahead of the model (0 = inline).
        host_threads: CPU threads of the training process's own torch ops on a CUDA run
            (``loop.host_threads``: 0 = the cores the loader's processes leave, at least one); CPU runs
            keep torch's default.
        seed: seeds weights of presets, data order and masks.
        ckpt_every_steps: optimizer steps between resumable checkpoints (reference 100).
        keep_checkpoints: newest resumable checkpoints kept per phase.
        progress: show a tqdm bar (rank 0 only).
    """

    stage: str
    model: str
    out_dir: str
    data: dict[str, str]
    task_weights: dict[str, float] = field(default_factory=dict)
    eval_data: dict[str, str] = field(default_factory=dict)
    eval_samples: int = 0
    eval_device: str = "auto"
    heldout_data: dict[str, str] = field(default_factory=dict)
    heldout_every_steps: int = 0
    heldout_samples: int = 64
    block_sizes: list[int] = field(default_factory=lambda: [32])
    mask_schedule: str = "stratified"
    clean_sees_noisy: bool = False
    teacher: str = ""
    teacher_block_size: int = 0
    kd_ratio: float = 1.0
    jsd_beta: float = 0.5
    temperature: float = 1.0
    top_k_overlap: int = 5
    on_policy: bool = False
    generate_interval: int = 2
    generate_steps: int = 32
    generate_commit_rule: str = "low_confidence_static"
    max_new_tokens: int = 128
    epochs: float = 5.0
    max_steps: int = 0
    max_phase_s: float = 0.0
    global_batch_size: int = 128
    local_batch_size: int = 4
    lr: float = 4e-5
    merger_lr: float = 4e-5
    visual_lr: float = 2e-6
    weight_decay: float = 0.05
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    warmup_steps_max: int = 1000
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    max_len: int = 8192
    min_pixels: int = 12_544
    max_pixels: int = 2_073_600
    dtype: str = "fp32"
    autocast_bf16: bool = False
    device: str = "auto"
    gradient_checkpointing: bool = False
    compile: bool = False
    num_workers: int = 0
    host_threads: int = 0
    seed: int = 0
    ckpt_every_steps: int = 100
    keep_checkpoints: int = 2
    progress: bool = True

    def __post_init__(self) -> None:
        _check_types(self)
        choices = {
            "stage": STAGES,
            "mask_schedule": MASK_SCHEDULES,
            "generate_commit_rule": commit_rules.names(),
            "dtype": ("fp32", "bf16"),
            "device": ("cpu", "cuda", "auto"),
            "eval_device": ("cpu", "cuda", "auto"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise InputError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("data", "task_weights", "eval_data", "heldout_data"):
            unknown = sorted(set(getattr(self, name)) - set(TASKS))
            if unknown:
                raise InputError(f"{name} names unknown tasks {unknown}; tasks are {TASKS}")
        if not self.data:
            raise InputError("data must name at least one task file")
        if not self.block_sizes or any(b < 1 for b in self.block_sizes):
            raise InputError(
                f"block_sizes must be a non-empty list of positive sizes, got {self.block_sizes}"
            )
        positive = ("global_batch_size", "local_batch_size", "max_len", "generate_interval", "top_k_overlap")
        for name in (*positive, "ckpt_every_steps", "keep_checkpoints", "generate_steps", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        counts = (self.max_steps, self.eval_samples, self.teacher_block_size, self.num_workers)
        if min(*counts, self.heldout_every_steps, self.heldout_samples, self.host_threads) < 0:
            raise InputError(
                "max_steps, eval_samples, teacher_block_size, num_workers, heldout_every_steps, "
                "heldout_samples and host_threads must be >= 0"
            )
        if self.max_phase_s < 0:
            raise InputError(f"max_phase_s must be >= 0, got {self.max_phase_s}")
        if self.max_steps == 0 and not self.epochs > 0:
            raise InputError("set max_steps or a positive epochs")
        if self.global_batch_size % self.local_batch_size:
            raise InputError(
                f"global_batch_size {self.global_batch_size} must be a multiple of local_batch_size "
                f"{self.local_batch_size}"
            )
        if not 0.0 <= self.kd_ratio <= 1.0 or not 0.0 < self.jsd_beta < 1.0 or not self.temperature > 0:
            raise InputError("need 0 <= kd_ratio <= 1, 0 < jsd_beta < 1 and temperature > 0")
        if self.compile and (self.gradient_checkpointing or self.on_policy or self.eval_data):
            # compile changes the model's text layers in place: the decoder that on_policy and eval_data
            # run would go through them with its KV cache, which they were not compiled for
            raise InputError("compile goes with none of gradient_checkpointing, on_policy and eval_data")
        self._check_stage()

    def _check_stage(self) -> None:
        if self.stage == "sft" and (self.block_sizes != [1] or self.mask_schedule != "full"):
            raise InputError(
                "stage sft trains the AR teacher: block_sizes must be [1] and mask_schedule full"
            )
        if self.stage == "distill":
            if not self.teacher:
                raise InputError("stage distill needs a teacher checkpoint (key teacher)")
            if len(self.block_sizes) != 1:
                raise InputError("stage distill trains one block size; give block_sizes a single entry")
        elif self.teacher or self.on_policy:
            raise InputError(f"teacher and on_policy belong to stage distill, not {self.stage}")

    def teacher_block_size_for(self, block_size: int) -> int:
        """The teacher mask's block size for a student block size (B/2 unless set, at least 1)."""
        return self.teacher_block_size or max(1, block_size // 2)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (YAML-serialisable)."""
        return dataclasses.asdict(self)


def _type_ok(value: Any, hint: Any) -> bool:
    """True when ``value`` fits the annotation ``hint`` (the subset of types TrainConfig uses)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(
            _type_ok(k, key) and _type_ok(v, item) for k, v in value.items()
        )
    return isinstance(value, hint)


def _check_types(config: TrainConfig) -> None:
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if hints[f.name] is float and isinstance(value, int | str) and not isinstance(value, bool):
            # YAML 1.1 reads "1e-4" (no dot) as a string and "5" as an int; both mean a float here
            with contextlib.suppress(ValueError):
                value = float(value)
                object.__setattr__(config, f.name, value)
        if not _type_ok(value, hints[f.name]):
            raise InputError(f"config key {f.name} must be {hints[f.name]}, got {value!r}")


def field_names() -> list[str]:
    """Names of every config key."""
    return [f.name for f in dataclasses.fields(TrainConfig)]


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["lr=1e-4", "block_sizes=[4,8]"]`` to a dict; values are read as YAML scalars or lists.

    Raises:
        InputError: an item without ``=`` or a key that is not a config field.
    """
    known = set(field_names())
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise InputError(f"override {item!r} must look like key=value")
        if key not in known:
            raise InputError(f"override key {key!r} is not a config field; known: {sorted(known)}")
        out[key] = yaml.safe_load(text) if text else ""
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a stage config from YAML and apply ``key=value`` overrides.

    Relative ``data``/``eval_data`` paths stay relative to the working directory (as on the command line).

    Args:
        path: YAML file holding a mapping of config keys.
        overrides: ``key=value`` strings applied after the file.

    Returns:
        The checked config.

    Raises:
        InputError: unreadable file, unknown keys, wrong types or inconsistent values.
    """
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"cannot read training config {path}: {error}") from error
    if not isinstance(values, dict):
        raise InputError(f"{path} must hold a mapping of config keys")
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise InputError(f"{path}: unknown config keys {unknown}; known: {field_names()}")
    values.update(parse_overrides(overrides or []))
    missing = [name for name in ("stage", "model", "out_dir", "data") if name not in values]
    if missing:
        raise InputError(f"{path}: required config keys missing: {missing}")
    return TrainConfig(**values)


def dump_config(config: TrainConfig, path: str | Path) -> None:
    """Write the config as YAML (what ``load_config`` reads back to an equal config)."""
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
