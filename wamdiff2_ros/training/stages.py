"""What each stage trains: its block-size phases, its collator, its loss, and distillation's teacher.

Stage 0 ``sft``: B = 1, every answer token masked: teacher-forced AR training without a logit shift, the AR
teacher the decoders' B = 1 path runs. Stage I ``adapt``: BD3-LM training with a 1/t-weighted CE, one phase
per block size, each phase starting from the previous weights. Stages II/III ``distill``: a frozen teacher and
the student score the same corrupted sequence; the teacher's mask uses its own (smaller) block size; JSD.
Block-wise (II) and model-wise (III) distillation differ only in the teacher checkpoint and block sizes.
The optimisation loop is ``loop.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.model.presets import PRESETS
from wamdiff2_ros.training.collate import DiffusionBatch, DiffusionCollator, RopeIndex
from wamdiff2_ros.training.config import TrainConfig
from wamdiff2_ros.training.data import Example, answer_ids
from wamdiff2_ros.training.forward import MaskedLogits, masked_targets
from wamdiff2_ros.training.losses import symmetric_jsd, top_k_overlap, weighted_masked_ce


@dataclass(frozen=True)
class Phase:
    """One block size of a stage."""

    index: int
    block_size: int
    teacher_block_size: int | None  # distillation only

    @property
    def name(self) -> str:
        """Folder name of the phase, e.g. ``B32``."""
        return f"B{self.block_size}"


def phases(config: TrainConfig) -> list[Phase]:
    """The phases of a stage, in training order."""
    return [
        Phase(
            index=i,
            block_size=b,
            teacher_block_size=config.teacher_block_size_for(b) if config.stage == "distill" else None,
        )
        for i, b in enumerate(config.block_sizes)
    ]


def make_collator(config: TrainConfig, phase: Phase, rope_index: RopeIndex) -> DiffusionCollator:
    """The collator of a phase (block size, mask schedule, teacher mask, mask variant)."""
    return DiffusionCollator(
        rope_index,
        phase.block_size,
        schedule=config.mask_schedule,
        teacher_block_size=phase.teacher_block_size,
        clean_sees_noisy=config.clean_sees_noisy,
        max_len=config.max_len,
    )


def load_model(
    spec: str, *, dtype: str, device: torch.device, seed: int
) -> tuple[Qwen3VLForConditionalGeneration, str]:
    """A model from a preset name (random weights) or a checkpoint folder.

    Returns:
        (model, source description).

    Raises:
        CheckpointError: ``spec`` is neither a preset nor a loadable checkpoint folder.
    """
    if spec in PRESETS and not Path(spec).is_dir():
        return build_model(
            spec, seed=seed, dtype=dtype, device=device
        ), f"preset {spec} (random, seed {seed})"
    loaded = load_checkpoint(spec, dtype=dtype, device=device)
    return loaded.model, loaded.source


def diffusion_loss(
    student: torch.nn.Module, batch: DiffusionBatch, num_samples: int, columns: torch.Tensor | None = None
) -> dict:
    """Stage 0 / I loss: 1/t-weighted CE on the masked positions.

    Args:
        student: ``MaskedLogits`` (possibly DDP-wrapped).
        batch: batch on the model's device.
        num_samples: samples of the optimizer step on this rank.
        columns: the student's logit columns (``forward.loss_columns``), None for the whole vocabulary.

    Returns:
        ``{"loss": tensor, "ce": detached tensor}`` (the caller reads it after the backward: reading it here
        would make the host wait for the forward before it queues the backward).
    """
    labels, noise, rows = masked_targets(batch, columns)
    loss = weighted_masked_ce(student(batch), labels, noise, rows, batch.response_lens, num_samples)
    return {"loss": loss, "ce": loss.detach()}


def distill_loss(
    student: torch.nn.Module,
    teacher: MaskedLogits,
    batch: DiffusionBatch,
    num_samples: int,
    config: TrainConfig,
    columns: torch.Tensor | None = None,
) -> dict:
    """Stage II / III loss: (1 - kd_ratio) CE + kd_ratio JSD, teacher and student on the same x_t.

    Args:
        student: ``MaskedLogits`` (possibly DDP-wrapped).
        teacher: the frozen teacher's ``MaskedLogits``.
        batch: batch with ``teacher_attention_mask`` and ``teacher_targets``, on the device.
        num_samples: samples of the optimizer step on this rank.
        config: kd_ratio, jsd_beta, temperature, top_k_overlap.
        columns: the logit columns of student and teacher (``forward.loss_columns``), None for all.

    Returns:
        ``{"loss": tensor, "ce", "jsd", "top_k_overlap": detached tensors}`` (read after the backward).
    """
    labels, noise, rows = masked_targets(batch, columns)
    student_logits = student(batch)
    with torch.no_grad():
        teacher_logits = teacher(batch, teacher_mask=True)
    # The JSD only where the teacher was taught: a smaller-block teacher never learnt the <|im_end|> padding
    # past its own block multiple (an AR teacher none at all), and matching its guesses there trains garbage.
    taught = batch.taught_rows
    student_taught, teacher_taught = student_logits[taught], teacher_logits[taught]
    jsd = symmetric_jsd(
        student_taught,
        teacher_taught,
        rows[taught],
        batch.response_lens,
        num_samples,
        beta=config.jsd_beta,
        temperature=config.temperature,
    )
    ce = weighted_masked_ce(student_logits, labels, noise, rows, batch.response_lens, num_samples)
    loss = (1.0 - config.kd_ratio) * ce + config.kd_ratio * jsd
    return {
        "loss": loss,
        "ce": ce.detach(),
        "jsd": jsd.detach(),
        "top_k_overlap": top_k_overlap(student_taught, teacher_taught, config.top_k_overlap),
    }


def regenerate(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    config: TrainConfig,
    block_size: int,
) -> list[Example]:
    """On-policy targets: each example's answer replaced by the student's own greedy decode.

    The reference decodes with the collator's block size, 32 steps, T = 0 and the static rule
    (distil_accelerate.py:627-732); the rule and steps are config keys here.

    Returns:
        New examples (same prompts, the decoded answers plus <|im_end|>).
    """
    decode_config = DecodeConfig(
        block_size=block_size,
        steps=config.generate_steps,
        commit_rule=config.generate_commit_rule,
        max_new_tokens=config.max_new_tokens,
    )
    was_training = model.training
    model.eval()
    out = []
    for example in examples:
        text = decode(model, tokenizer, example.prompt, decode_config).text
        out.append(replace(example, response_ids=answer_ids(tokenizer, text)))
    model.train(was_training)
    return out
