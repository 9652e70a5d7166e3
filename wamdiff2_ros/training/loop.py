"""The one training loop: single process on the CPU or one process per GPU under ``torchrun`` (DDP).

It owns the optimizer, the learning-rate schedule, gradient accumulation, resumable checkpoints, JSONL
metrics, the loss-curve PNG, the progress bar and end-of-phase evaluation. What is trained and with which loss
is ``stages.py``'s; batches are ``collate.py``'s. FSDP2 is not wired: DDP keeps a full model per GPU, which
fits the 2b preset on an H200 (see docs/DECISIONS.md).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.model.prompt import COMMAND_RULE_KEY, MIN_INT_DIGITS_KEY, answers_min_int_digits
from wamdiff2_ros.model.tokenizer import load_tokenizer
from wamdiff2_ros.training import checkpoints
from wamdiff2_ros.training.collate import DiffusionBatch, DiffusionCollator, model_rope_index
from wamdiff2_ros.training.config import TrainConfig, dump_config
from wamdiff2_ros.training.data import Example, Record, RecordDataset, epoch_order, load_task_records
from wamdiff2_ros.training.evaluate import evaluate_records
from wamdiff2_ros.training.forward import MaskedLogits, check_answer_columns, loss_columns
from wamdiff2_ros.training.report import append_metrics, plot_loss
from wamdiff2_ros.training.stages import (
    Phase,
    diffusion_loss,
    distill_loss,
    load_model,
    make_collator,
    phases,
    regenerate,
)
from wamdiff2_ros.training.throughput import mfu, train_step_flops

FINAL = "final"


@dataclass(frozen=True)
class Runtime:
    """Where this process runs: rank, world size and device."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """True on rank 0, which writes files and shows progress."""
        return self.rank == 0


def init_runtime(device: str) -> Runtime:
    """Join the process group when started by torchrun (WORLD_SIZE > 1), else run alone.

    Args:
        device: ``cpu``, ``cuda`` or ``auto``.

    Returns:
        The runtime; under torchrun each rank takes GPU ``LOCAL_RANK`` (NCCL) or the CPU (gloo).
    """
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return Runtime(rank, world_size, torch.device("cuda", local_rank) if use_cuda else torch.device("cpu"))


def lr_scale(step: float, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier: linear warmup from 0.1 to 1, then cosine to 0.01 (reference finetune.py:600-640)."""
    if step < warmup_steps:
        return 0.1 + 0.9 * step / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: Qwen3VLForConditionalGeneration, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with the reference's three learning rates: language model, vision merger, vision blocks.

    Weight decay applies to matrices only (norm gains and biases are not decayed).
    """
    groups: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if ".visual." in f".{name}":
            lr = config.merger_lr if "merger" in name else config.visual_lr
        else:
            lr = config.lr
        decay = config.weight_decay if param.ndim >= 2 else 0.0
        groups.setdefault((lr, decay), []).append(param)
    param_groups = [
        {"params": params, "lr": lr, "base_lr": lr, "weight_decay": decay}
        for (lr, decay), params in groups.items()
    ]
    return torch.optim.AdamW(param_groups, betas=(config.adam_beta1, config.adam_beta2))


class BatchStream:
    """Record indices of every micro-batch of a phase: epochs of the task mix, split across ranks.

    Micro-batch m on rank r reads positions ``(m * world + r) * local`` onward of the endless sequence of
    epoch orders, so a resumed run reads exactly what the interrupted one would have read.
    """

    def __init__(self, records: list[Record], config: TrainConfig, phase: Phase, runtime: Runtime) -> None:
        self.records = records
        self.weights = config.task_weights
        self.seed = config.seed + 7919 * phase.index  # each phase its own order
        self.local = config.local_batch_size
        self.runtime = runtime
        self.epoch_len = len(epoch_order(records, self.weights, self.seed, 0))
        self._orders: dict[int, list[int]] = {}

    def _at(self, position: int) -> int:
        epoch, offset = divmod(position, self.epoch_len)
        if epoch not in self._orders:
            self._orders = {epoch: epoch_order(self.records, self.weights, self.seed, epoch)}
        return self._orders[epoch][offset]

    def micro_batch(self, micro_index: int) -> list[int]:
        """Record indices of global micro-batch ``micro_index`` for this rank."""
        start = (micro_index * self.runtime.world_size + self.runtime.rank) * self.local
        return [self._at(p) for p in range(start, start + self.local)]


@dataclass(frozen=True)
class SeededCollate:
    """Collates global micro-batch m with a mask generator seeded by (seed, phase, step, micro, rank): the
    same batch in a DataLoader worker or in the main process, in a fresh run or a resumed one."""

    collator: DiffusionCollator
    seed: int
    phase_index: int
    accumulation: int
    rank: int

    def __call__(self, micro_index: int, examples: list[Example]) -> DiffusionBatch:
        step, micro = divmod(micro_index, self.accumulation)
        seed = hash((self.seed, self.phase_index, step, micro, self.rank)) % (2**63)
        return self.collator(examples, torch.Generator().manual_seed(seed))


class MicroBatches(torch.utils.data.Dataset):
    """Item m: global micro-batch m on this rank, read in DataLoader workers; collated there too when
    ``collate`` is given (off-policy stages), which takes the mask building off the training loop."""

    def __init__(
        self, dataset: RecordDataset, stream: BatchStream, length: int, collate: SeededCollate | None
    ) -> None:
        self.dataset, self.stream, self.length, self.collate = dataset, stream, length, collate

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, micro_index: int) -> list[Example] | DiffusionBatch:
        examples = [self.dataset[i] for i in self.stream.micro_batch(micro_index)]
        return examples if self.collate is None else self.collate(micro_index, examples)


def _as_is(item: list[Example] | DiffusionBatch) -> list[Example] | DiffusionBatch:
    return item  # already a micro-batch: no DataLoader batching


def phase_steps(config: TrainConfig, epoch_len: int) -> int:
    """Optimizer steps of a phase: ``max_steps``, else ``epochs`` passes over the task mix."""
    return config.max_steps or max(1, math.ceil(config.epochs * epoch_len / config.global_batch_size))


def _mean_over_ranks(values: dict[str, float], runtime: Runtime) -> dict[str, float]:
    if runtime.world_size == 1:
        return values
    tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=runtime.device)
    dist.all_reduce(tensor)
    return dict(zip(values, (tensor / runtime.world_size).tolist(), strict=True))


def _sum_over_ranks(value: float, runtime: Runtime) -> float:
    if runtime.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=runtime.device)
    dist.all_reduce(tensor)
    return float(tensor[0])


def host_threads(config: TrainConfig, device_type: str, cpu_count: int) -> int | None:
    """Threads for the training process's torch ops, or None to keep torch's default (CPU training).

    On CUDA the process's host work is small ops (the answers' check, the step's cost), and OpenMP threads
    that wait for cores the loader's processes keep busy may stretch each to tens of ms (the fourth seeing
    run's profile, 2026-12-03: a sum 17 ms, a searchsorted 22 ms in a 177 ms step; not yet measured with
    fewer threads): the process takes the cores the loader leaves.
    """
    if device_type != "cuda":
        return None
    return config.host_threads or max(1, cpu_count - config.num_workers)


class PhaseTrainer:
    """Trains one phase (block size) of a stage from a model to a final checkpoint."""

    def __init__(
        self,
        config: TrainConfig,
        phase: Phase,
        runtime: Runtime,
        model: Qwen3VLForConditionalGeneration,
        tokenizer: PreTrainedTokenizerBase,
        records: list[Record],
        teacher: MaskedLogits | None,
        deadline: float | None = None,
    ) -> None:
        self.config, self.phase, self.runtime = config, phase, runtime
        threads = host_threads(config, runtime.device.type, os.cpu_count() or 1)
        if threads is not None:
            torch.set_num_threads(threads)
        self.deadline = deadline  # time.time() at which the phase stops early, resumably
        self.spent_before = 0.0  # seconds this phase trained in earlier runs (its checkpoint's phase_s)
        self._started = time.perf_counter()
        self.model, self.tokenizer, self.teacher = model, tokenizer, teacher
        self.dir = Path(config.out_dir) / phase.name
        self.metrics_path = Path(config.out_dir) / "metrics.jsonl"
        self.dataset = RecordDataset(
            records, tokenizer, min_pixels=config.min_pixels, max_pixels=config.max_pixels
        )
        self.stream = BatchStream(records, config, phase, runtime)
        self.total_steps = phase_steps(config, self.stream.epoch_len)
        per_step = config.local_batch_size * runtime.world_size
        if config.global_batch_size % per_step:
            raise InputError(
                f"global_batch_size {config.global_batch_size} is not a multiple of local_batch_size x world "
                f"size ({per_step})"
            )
        self.accumulation = config.global_batch_size // per_step
        self.collate = SeededCollate(
            make_collator(config, phase, model_rope_index(model)),
            config.seed,
            phase.index,
            self.accumulation,
            runtime.rank,
        )
        self.warmup = min(config.warmup_steps_max, int(config.warmup_fraction * self.total_steps))
        self.optimizer = make_optimizer(model, config)
        self.columns = loss_columns(model, teacher.model if teacher is not None else None)
        self.host_columns = None if self.columns is None else self.columns.cpu()  # the answers' check
        if teacher is not None:
            teacher.columns = self.columns
        student: torch.nn.Module = MaskedLogits(model, self.columns, compile=config.compile)
        self.unwrapped = student  # the held-out loss runs on the main rank alone: past DDP, no collectives
        if runtime.world_size > 1:
            device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
            student = torch.nn.parallel.DistributedDataParallel(student, device_ids=device_ids)
        self.student = student
        self.heldout = self._heldout_batches() if runtime.is_main else []

    def _resume(self) -> int:
        latest = checkpoints.latest_step_folder(self.dir)
        if latest is None:
            return 0
        loaded = load_checkpoint(latest, dtype=self.config.dtype, device="cpu").model
        self.model.load_state_dict(loaded.state_dict())
        checkpoints.load_optimizer_state(latest, self.optimizer)
        state = checkpoints.read_state(latest)
        self.spent_before = float(state.get("phase_s", 0.0))
        return int(state["step"])

    def _heldout_batches(self) -> list[DiffusionBatch]:
        """The held-out loss's fixed batches: the first ``heldout_samples`` records, taking each task in
        turn, masked once (a fixed seed) so that every point of the curve scores the same corruption."""
        config = self.config
        if not (config.heldout_every_steps and config.heldout_data):
            return []
        by_task: dict[str, list[Record]] = {}
        for record in load_task_records(config.heldout_data):
            by_task.setdefault(record.task, []).append(record)
        turns = itertools.chain.from_iterable(itertools.zip_longest(*by_task.values()))
        chosen = [record for record in turns if record is not None][: config.heldout_samples]
        dataset = RecordDataset(
            chosen, self.tokenizer, min_pixels=config.min_pixels, max_pixels=config.max_pixels
        )
        generator = torch.Generator().manual_seed(config.seed + 104_729)
        size = config.local_batch_size
        batches = [
            self.collate.collator(
                [dataset[i] for i in range(start, min(start + size, len(chosen)))], generator
            )
            for start in range(0, len(chosen), size)
        ]
        for batch in batches:
            check_answer_columns(batch, self.host_columns)
        return batches

    @torch.no_grad()
    def _heldout_row(self, step: int) -> dict:
        """The stage's loss on the held-out batches (losses summed as a step's are, the rest averaged)."""
        samples = sum(len(batch.response_lens) for batch in self.heldout)
        autocast = torch.autocast(self.runtime.device.type, torch.bfloat16, enabled=self.config.autocast_bf16)
        sums: dict[str, float] = {}
        self.model.eval()
        for batch in self.heldout:
            batch = batch.to(self.runtime.device, self.model.dtype)
            with autocast:
                if self.teacher is None:
                    out = diffusion_loss(self.unwrapped, batch, samples, self.columns)
                else:
                    out = distill_loss(
                        self.unwrapped, self.teacher, batch, samples, self.config, self.columns
                    )
            for key, value in out.items():
                value = float(value)
                summed = key in ("loss", "ce", "jsd")
                sums[key] = sums.get(key, 0.0) + (value if summed else value / len(self.heldout))
        self.model.train()
        row = {"kind": "heldout", "phase": self.phase.name, "block_size": self.phase.block_size, "step": step}
        return row | sums

    def _spent(self) -> float:
        """Seconds the phase has trained, in earlier runs and this one."""
        return self.spent_before + time.perf_counter() - self._started

    def _past_deadline(self) -> bool:
        if self.deadline is None:  # the same on every rank: no collective needed
            return False
        late = time.time() >= self.deadline
        return _sum_over_ranks(float(late), self.runtime) > 0  # every rank stops at the same step

    def _loader(self, start_step: int) -> Iterator[list[Example] | DiffusionBatch]:
        """Every micro-batch from ``start_step`` on, read ahead by ``num_workers`` processes: collated
        batches, or examples when the stage regenerates answers with the model first (on-policy)."""
        first, end = start_step * self.accumulation, self.total_steps * self.accumulation
        collate = None if self.config.on_policy else self.collate
        loader = torch.utils.data.DataLoader(
            MicroBatches(self.dataset, self.stream, end, collate),
            batch_size=None,
            sampler=range(first, end),
            num_workers=self.config.num_workers,
            collate_fn=_as_is,
            pin_memory=self.runtime.device.type == "cuda",  # then _micro_step's copies are asynchronous
        )
        return iter(loader)

    def _micro_step(self, step: int, micro: int, item: list[Example] | DiffusionBatch) -> tuple[dict, dict]:
        """Forward and backward of one micro-batch; returns (metrics, cost: seq lens, head positions,
        patches per image)."""
        if isinstance(item, DiffusionBatch):
            batch = item
        else:
            examples = item
            if step % self.config.generate_interval == 0:
                block = self.phase.block_size
                examples = regenerate(self.model, self.tokenizer, examples, self.config, block)
            batch = self.collate(step * self.accumulation + micro, examples)
        check_answer_columns(batch, self.host_columns)
        cost = {  # from the host's copy: read on the device, these would wait for the step's kernels
            "seq_lens": (batch.prefix_lens + 2 * batch.response_lens).tolist(),
            "head_positions": int(batch.loss_mask.sum()),
            "image_patches": [] if batch.image_grid_thw is None else batch.image_grid_thw.prod(-1).tolist(),
        }
        batch = batch.to(self.runtime.device, self.model.dtype, non_blocking=True)
        samples = self.config.local_batch_size * self.accumulation
        last = micro == self.accumulation - 1
        sync = contextlib.nullcontext() if last or self.runtime.world_size == 1 else self.student.no_sync()
        autocast = torch.autocast(self.runtime.device.type, torch.bfloat16, enabled=self.config.autocast_bf16)
        with sync:
            with autocast:
                if self.teacher is None:
                    out = diffusion_loss(self.student, batch, samples, self.columns)
                else:
                    out = distill_loss(self.student, self.teacher, batch, samples, self.config, self.columns)
            out["loss"].backward()  # outside autocast: backward ops take the forward's dtypes
        # read after the backward is queued: one wait for the device a micro-batch
        metrics = {k: float(v.detach()) if torch.is_tensor(v) else v for k, v in out.items()}
        return metrics, cost

    def _schedule_position(self, step: int) -> float:
        """The step the learning-rate schedule is at: ``step``, or further along when the phase's
        wall-clock budget (counted over every run of the phase) runs out sooner."""
        if not self.config.max_phase_s:
            return step
        return max(step, self._spent() / self.config.max_phase_s * self.total_steps)

    def _step(
        self, step: int, batches: Iterator[list[Example] | DiffusionBatch], schedule_position: float
    ) -> dict:
        scale = lr_scale(schedule_position, self.total_steps, self.warmup)
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * scale
        started = time.perf_counter()
        sums: dict[str, float] = {}
        cost: dict[str, list[int]] = {"seq_lens": [], "head_positions": [], "image_patches": []}
        data_s = 0.0
        for micro in range(self.accumulation):
            waited = time.perf_counter()
            item = next(batches)
            data_s += time.perf_counter() - waited  # time the accelerator waits for data (0 when read ahead)
            metrics, micro_cost = self._micro_step(step, micro, item)
            for key, value in metrics.items():
                # loss and ce are already divided by the step's samples: sum them; average the rest
                sums[key] = sums.get(key, 0.0) + (
                    value if key in ("loss", "ce", "jsd") else value / self.accumulation
                )
            cost["seq_lens"] += micro_cost["seq_lens"]
            cost["head_positions"].append(micro_cost["head_positions"])
            cost["image_patches"] += micro_cost["image_patches"]
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.runtime.device.type == "cuda":
            torch.cuda.synchronize(self.runtime.device)
        seconds = time.perf_counter() - started
        row = _mean_over_ranks(sums, self.runtime)
        all_tokens = _sum_over_ranks(sum(cost["seq_lens"]), self.runtime)
        flops = train_step_flops(
            self.model.config, cost["seq_lens"], sum(cost["head_positions"]), cost["image_patches"]
        )
        device_name = (
            torch.cuda.get_device_name(self.runtime.device) if self.runtime.device.type == "cuda" else "cpu"
        )
        row |= {
            "kind": "train",
            "phase": self.phase.name,
            "block_size": self.phase.block_size,
            "step": step + 1,
            "lr": self.config.lr * scale,
            "grad_norm": float(grad_norm),
            "tokens": int(all_tokens),
            "step_s": seconds,
            "data_s": data_s,
            "tokens_per_s": all_tokens / seconds,
            "mfu": mfu(flops, seconds, device_name),
        }
        if self.runtime.device.type == "cuda":
            row["max_memory_gib"] = torch.cuda.max_memory_allocated(self.runtime.device) / 2**30
        return row

    def _save(self, step: int, final: bool) -> None:
        folder = self.dir / FINAL if final else checkpoints.step_folder(self.dir, step)
        state = {"stage": self.config.stage, "phase": self.phase.name, "block_size": self.phase.block_size}
        state |= {"step": step, "total_steps": self.total_steps, "max_phase_s": self.config.max_phase_s}
        state["phase_s"] = self._spent()
        optimizer = None if final else self.optimizer
        checkpoints.save_training_checkpoint(
            folder, self.model, self.tokenizer, self.config, state, optimizer
        )
        if not final:
            checkpoints.prune_step_folders(self.dir, self.config.keep_checkpoints)

    def run(self) -> Path | None:
        """Train the phase (resuming from its newest checkpoint) and write its final checkpoint.

        Returns:
            The final checkpoint folder, or None when the deadline came first: the phase then stopped
            with a step checkpoint to resume from.
        """
        from tqdm import tqdm

        start = self._resume()
        self.model.train()
        if self.config.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        bar = tqdm(
            total=self.total_steps,
            initial=start,
            desc=f"{self.config.stage} {self.phase.name}",
            disable=not (self.config.progress and self.runtime.is_main),
        )
        batches = self._loader(start)
        self._started = time.perf_counter()
        done, stopped = start, False
        for step in range(start, self.total_steps):
            position = self._schedule_position(step)
            if position >= self.total_steps:
                break  # wall-clock budget used up
            if self._past_deadline():
                stopped = True
                break
            row = self._step(step, batches, position)
            done = step + 1
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.4f}", tok_s=f"{row['tokens_per_s']:.0f}")
            if self.runtime.is_main:
                append_metrics(self.metrics_path, row)
                if self.heldout and (step + 1) % self.config.heldout_every_steps == 0:
                    append_metrics(self.metrics_path, self._heldout_row(step + 1))
                if (step + 1) % self.config.ckpt_every_steps == 0 and step + 1 < self.total_steps:
                    self._save(step + 1, final=False)
        bar.close()
        del batches  # ends the loader: its workers exit now, not inside a later phase's fork
        if self.config.gradient_checkpointing:
            self.model.gradient_checkpointing_disable()
        self.model.eval()
        final = self.dir / FINAL
        if self.runtime.is_main:
            self._save(done, final=not stopped)
            plot_loss(self.metrics_path, Path(self.config.out_dir) / "loss.png")
        if self.runtime.world_size > 1:
            dist.barrier()
        return None if stopped else final


def _evaluate(
    config: TrainConfig, phase: Phase, model: Qwen3VLForConditionalGeneration, tokenizer, runtime: Runtime
) -> dict:
    records = load_task_records(config.eval_data)
    if config.eval_samples:
        by_task: dict[str, list[Record]] = {}
        for record in records:
            by_task.setdefault(record.task, []).append(record)
        records = [r for rows in by_task.values() for r in rows[: config.eval_samples]]
    eval_device = runtime.device if config.eval_device == "auto" else torch.device(config.eval_device)
    try:
        return evaluate_records(
            model.to(eval_device),
            tokenizer,
            records,
            phase.block_size,
            max_new_tokens=config.max_new_tokens,
            min_pixels=config.min_pixels,
            max_pixels=config.max_pixels,
        )
    finally:
        model.to(runtime.device)


def train(config: TrainConfig, deadline: float | None = None) -> dict:
    """Run a stage: every phase in order, each resumed or skipped when already finished.

    Args:
        config: the stage config.
        deadline: ``time.time()`` at which training stops early (a step checkpoint to resume from, and
            ``"stopped": True`` in the result); None: no deadline.

    Returns:
        ``{"out_dir", "phases": [{"phase", "checkpoint", "eval"?}], "stopped"}``; a stopped stage lists
        only its finished phases.

    Raises:
        InputError: unreadable records or images, or batch sizes that do not divide over the ranks.
        CheckpointError: the initial model, the teacher or a checkpoint to resume cannot be loaded.
    """
    runtime = init_runtime(config.device)
    out_dir = Path(config.out_dir)
    if runtime.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        dump_config(config, out_dir / "train_config.yaml")
    tokenizer = load_tokenizer(config.model if Path(config.model).is_dir() else None)
    records = load_task_records(config.data)
    model, _ = load_model(config.model, dtype=config.dtype, device=runtime.device, seed=config.seed)
    planning = [record.answer for record in records if record.task == "planning"]
    if planning:  # what the model learns travels in its config.json: the number style and frame it writes
        from wamdiff2_ros.model.plan_frame import PLAN_FRAME_KEY  # and the command rule it reads (its data
        from wamdiff2_ros.sim.dataset import load_command_rule, load_plan_frame  # folder's)

        data_dir = Path(config.data["planning"]).parent
        frame = load_plan_frame(data_dir)
        for name, other in (("eval_data", config.eval_data), ("heldout_data", config.heldout_data)):
            if "planning" in other and load_plan_frame(Path(other["planning"]).parent) != frame:
                raise InputError(f"{name}'s plans are in another frame than the training data's {frame!r}")
        setattr(model.config, MIN_INT_DIGITS_KEY, answers_min_int_digits(planning))
        setattr(model.config, COMMAND_RULE_KEY, load_command_rule(data_dir))
        setattr(model.config, PLAN_FRAME_KEY, frame)
    teacher = None
    if config.stage == "distill":
        teacher_model, _ = load_model(
            config.teacher, dtype=config.dtype, device=runtime.device, seed=config.seed + 1
        )
        teacher = MaskedLogits(teacher_model.requires_grad_(False).eval(), compile=config.compile)
    summary: dict = {"out_dir": str(out_dir), "phases": [], "stopped": False}
    for phase in phases(config):
        final = out_dir / phase.name / FINAL
        if (final / checkpoints.STATE).is_file():
            model = load_checkpoint(final, dtype=config.dtype, device=runtime.device).model
        else:
            final = PhaseTrainer(config, phase, runtime, model, tokenizer, records, teacher, deadline).run()
            if final is None:
                summary["stopped"] = True
                break
        entry: dict = {"phase": phase.name, "checkpoint": str(final)}
        if config.eval_data and runtime.is_main:
            entry["eval"] = _evaluate(config, phase, model, tokenizer, runtime)
            for task, metrics in entry["eval"].items():
                row = {"kind": "eval", "phase": phase.name, "step": task, "task": task, **metrics}
                append_metrics(out_dir / "metrics.jsonl", row)
        summary["phases"].append(entry)
    if runtime.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()  # torchrun warns about (and may leak) a group left open at exit
    return summary
