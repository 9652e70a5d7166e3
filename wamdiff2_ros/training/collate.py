"""[prefix | clean | noisy] answer batches: stratified per-block mask ratios, training masks, positions.

BD3-LM layout as the reference builds it (docs/REFERENCE.md §1.5-1.6): the answer is
padded with <|im_end|> to a multiple of B, the noisy copy masks each token of block i with probability t_i,
and the noisy copy shares the clean copy's block ids and M-RoPE positions. The mask rules themselves are the
model layer's (``model/masks.py``); this module only lays samples out and draws the noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.masks import training_mask_batch
from wamdiff2_ros.model.positions import training_positions
from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID
from wamdiff2_ros.training.data import Example

MIN_NOISE = (
    0.001  # lower clamp of u and the t of prefix/clean tokens (reference collate_fns.py:914-920, 1215)
)
IGNORE = -100  # label of positions without loss

# (input_ids (1, L), mm_token_type_ids (1, L), image_grid_thw (n, 3) or None) -> (positions (3, 1, L), delta)
RopeIndex = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


def model_rope_index(model: torch.nn.Module) -> RopeIndex:
    """The model's own M-RoPE index function (it knows the vision merge size), as a ``RopeIndex``."""
    inner = model.model

    def rope_index(
        input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, grid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if grid is None:  # text only: M-RoPE reduces to the plain index on all three axes
            return torch.arange(input_ids.shape[1]).view(1, 1, -1).expand(3, 1, -1), torch.zeros(1, 1)
        return inner.get_rope_index(input_ids, mm_token_type_ids, image_grid_thw=grid)

    return rope_index


@dataclass
class DiffusionBatch:
    """One padded batch of the training layout (each sample left-aligned, padded with <|im_end|>)."""

    input_ids: torch.Tensor  # (b, L) int64; noisy copy holds MASK_ID where masked
    labels: torch.Tensor  # (b, L) int64: the clean token at masked noisy positions, IGNORE elsewhere
    noise_level: torch.Tensor  # (b, L) float32: t of the token's block (MIN_NOISE outside the noisy copy)
    loss_mask: torch.Tensor  # (b, L) bool: positions whose input is MASK_ID
    # (n,) int64: flat (b * L) indices of loss_mask's positions, row-major, found on the host: a boolean
    # index on the device makes the host wait for the count (a sync in the forward and in the backward)
    masked_positions: torch.Tensor
    attention_mask: torch.Tensor  # (b, 1, L, L) bool, True = attend
    position_ids: torch.Tensor  # (3, b, L) int64 M-RoPE positions; the noisy copy reuses the clean ones
    mm_token_type_ids: torch.Tensor  # (b, L) int32: 1 at <|image_pad|>
    image_positions: torch.Tensor  # (m,) int64: flat (b * L) indices of the <|image_pad|> tokens, row-major
    pixel_values: torch.Tensor | None  # (patches, 1536) float32, images of all samples in order
    image_grid_thw: torch.Tensor | None  # (images, 3) int64
    prefix_lens: torch.Tensor  # (b,) int64 P
    response_lens: torch.Tensor  # (b,) int64 padded R (the loss normaliser)
    block_size: int
    teacher_attention_mask: torch.Tensor | None = None  # (b, 1, L, L) bool at the teacher's block size
    # (b, L) bool: masked positions inside the answer padded to the teacher's block size, the ones the teacher
    # was trained to predict (past them it only ever saw padding it was never asked for)
    teacher_targets: torch.Tensor | None = None
    # (t,) int64: which of the n masked positions (``masked_positions``' order) are teacher targets, found on
    # the host as the positions are
    taught_rows: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens in the batch: sum of P + 2R."""
        return int((self.prefix_lens + 2 * self.response_lens).sum())

    def to(
        self, device: torch.device | str, float_dtype: torch.dtype = torch.float32, non_blocking: bool = False
    ) -> DiffusionBatch:
        """The batch on ``device``; pixel values in ``float_dtype`` (the model's); the image grids stay on the
        host, which reads them. ``non_blocking`` copies a pinned batch asynchronously (the caller keeps it
        alive until the copies are used)."""
        moved = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor) and f.name != "image_grid_thw":
                dtype = float_dtype if f.name == "pixel_values" else value.dtype
                value = value.to(device, dtype, non_blocking=non_blocking)
            moved[f.name] = value
        return replace(self, **moved)

    def pin_memory(self) -> DiffusionBatch:
        """The batch in page-locked host memory (the DataLoader's ``pin_memory`` calls this): a CUDA copy
        from pageable memory goes through a staging buffer at a few GB/s and blocks the host (on the H200
        ~80 ms of a 0.25 s training step at 256 frames of 256x144 px: 226 MB of fp32 patches)."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: v.pin_memory() for k, v in pinned.items() if isinstance(v, torch.Tensor)})


def stratified_mask_ratios(num_blocks: int, generator: torch.Generator) -> torch.Tensor:
    """One mask ratio per block, one in each stratum [i/N, (i+1)/N), randomly assigned to blocks.

    t_i = u_i / N + i / N with u_i ~ U(0, 1) clamped to [0.001, 1], then permuted (reference
    collate_fns.py:914-920, 1172-1173; "antithetic sampling").

    Args:
        num_blocks: N, response blocks of the sample.
        generator: the random source.

    Returns:
        (N,) float32 ratios in (0, 1].
    """
    u = torch.rand(num_blocks, generator=generator).clamp(MIN_NOISE, 1.0)
    t = (u + torch.arange(num_blocks)) / num_blocks
    return t[torch.randperm(num_blocks, generator=generator)]


def padded_response(response_ids: torch.Tensor, block_size: int) -> torch.Tensor:
    """The answer (ending in <|im_end|>) padded with <|im_end|> to a multiple of B (reference pad token)."""
    length = math.ceil(len(response_ids) / block_size) * block_size
    return torch.cat([response_ids, torch.full((length - len(response_ids),), EOS_ID)])


def noisy_copy(
    clean: torch.Tensor, block_size: int, schedule: str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask a padded answer block by block.

    Args:
        clean: (R,) padded answer, R a multiple of B.
        block_size: B.
        schedule: ``stratified`` (per-block ratios, tokens masked independently with probability t_i) or
            ``full`` (every token masked, t = 1).
        generator: the random source.

    Returns:
        (noisy tokens (R,), t per token (R,) float32).
    """
    num_blocks = len(clean) // block_size
    if schedule == "full":
        t = torch.ones(len(clean))
    else:
        t = stratified_mask_ratios(num_blocks, generator).repeat_interleave(block_size)
    masked = torch.rand(len(clean), generator=generator) < t
    return torch.where(masked, MASK_ID, clean), t


class DiffusionCollator:
    """Builds ``DiffusionBatch``es from examples (callable; the generator makes masks reproducible)."""

    def __init__(
        self,
        rope_index: RopeIndex,
        block_size: int,
        *,
        schedule: str = "stratified",
        teacher_block_size: int | None = None,
        clean_sees_noisy: bool = False,
        max_len: int = 8192,
    ) -> None:
        """Args:
        rope_index: M-RoPE index function (``model_rope_index(model)``).
        block_size: B of the student's mask and of the answer padding.
        schedule: ``stratified`` or ``full`` (see ``noisy_copy``).
        teacher_block_size: also build the teacher's mask at this block size (distillation).
        clean_sees_noisy: the reference SFT collator's mask variant (pitfall 1).
        max_len: longest allowed sample (P + 2R).
        """
        if teacher_block_size is not None and block_size % teacher_block_size:
            raise InputError(f"teacher block size {teacher_block_size} must divide block size {block_size}")
        self.rope_index = rope_index
        self.block_size = block_size
        self.schedule = schedule
        self.teacher_block_size = teacher_block_size
        self.clean_sees_noisy = clean_sees_noisy
        self.max_len = max_len

    def __call__(self, examples: list[Example], generator: torch.Generator) -> DiffusionBatch:
        """Lay out, mask and pad ``examples``.

        Raises:
            InputError: no examples, or a sample longer than ``max_len``.
        """
        if not examples:
            raise InputError("cannot collate an empty batch")
        rows = [self._row(example, generator) for example in examples]
        total = max(len(r["input_ids"]) for r in rows)
        batch = len(rows)
        input_ids = torch.full((batch, total), EOS_ID, dtype=torch.int64)
        labels = torch.full((batch, total), IGNORE, dtype=torch.int64)
        noise = torch.full((batch, total), MIN_NOISE)
        mm = torch.zeros((batch, total), dtype=torch.int32)
        positions = torch.zeros((3, batch, total), dtype=torch.int64)
        for i, row in enumerate(rows):
            length = len(row["input_ids"])
            input_ids[i, :length] = row["input_ids"]
            labels[i, :length] = row["labels"]
            noise[i, :length] = row["noise"]
            mm[i, :length] = row["mm"]
            positions[:, i, :length] = row["positions"]
        prefix_lens = [r["prefix_len"] for r in rows]
        response_lens = [r["response_len"] for r in rows]
        images = [e.prompt for e in examples if e.prompt.pixel_values is not None]
        teacher_mask = teacher_targets = taught_rows = None
        loss_mask = input_ids == MASK_ID
        loss_positions = loss_mask.flatten().nonzero()[:, 0]
        if self.teacher_block_size is not None:
            teacher_mask = training_mask_batch(
                prefix_lens,
                response_lens,
                self.teacher_block_size,
                total,
                clean_sees_noisy=self.clean_sees_noisy,
            )
            teacher_targets = torch.zeros((batch, total), dtype=torch.bool)
            for i, row in enumerate(rows):
                start = row["prefix_len"] + row["response_len"]  # the noisy copy
                taught = math.ceil(row["answer_len"] / self.teacher_block_size) * self.teacher_block_size
                teacher_targets[i, start : start + min(taught, row["response_len"])] = True
            teacher_targets &= input_ids == MASK_ID
            taught_rows = teacher_targets.flatten()[loss_positions].nonzero()[:, 0]
        return DiffusionBatch(
            input_ids=input_ids,
            labels=labels,
            noise_level=noise,
            loss_mask=loss_mask,
            masked_positions=loss_positions,
            attention_mask=training_mask_batch(
                prefix_lens, response_lens, self.block_size, total, clean_sees_noisy=self.clean_sees_noisy
            ),
            position_ids=positions,
            mm_token_type_ids=mm,
            image_positions=mm.flatten().nonzero()[:, 0],
            pixel_values=torch.cat([p.pixel_values for p in images]) if images else None,
            image_grid_thw=torch.cat([p.image_grid_thw for p in images]) if images else None,
            prefix_lens=torch.tensor(prefix_lens),
            response_lens=torch.tensor(response_lens),
            block_size=self.block_size,
            teacher_attention_mask=teacher_mask,
            teacher_targets=teacher_targets,
            taught_rows=taught_rows,
        )

    def _row(self, example: Example, generator: torch.Generator) -> dict:
        prompt = example.prompt
        clean = padded_response(example.response_ids, self.block_size)
        prefix_len, response_len = prompt.length, len(clean)
        if prefix_len + 2 * response_len > self.max_len:
            raise InputError(
                f"sample {example.record.id} has {prefix_len + 2 * response_len} tokens with its noisy copy, "
                f"more than max_len {self.max_len}"
            )
        noisy, t = noisy_copy(clean, self.block_size, self.schedule, generator)
        mm_clean = torch.cat([prompt.mm_token_type_ids[0], torch.zeros(response_len, dtype=torch.int32)])
        prefix_and_clean = torch.cat([prompt.input_ids[0], clean])
        positions, _ = self.rope_index(prefix_and_clean[None], mm_clean[None], prompt.image_grid_thw)
        ignore = torch.full((prefix_len + response_len,), IGNORE)
        return {
            "input_ids": torch.cat([prefix_and_clean, noisy]),
            "labels": torch.cat([ignore, torch.where(noisy == MASK_ID, clean, IGNORE)]),
            "noise": torch.cat([torch.full((prefix_len + response_len,), MIN_NOISE), t]),
            "mm": torch.cat([mm_clean, torch.zeros(response_len, dtype=torch.int32)]),
            "positions": training_positions(positions, response_len)[:, 0],
            "prefix_len": prefix_len,
            "response_len": response_len,
            "answer_len": len(example.response_ids),
        }
