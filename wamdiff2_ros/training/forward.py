"""The training forward: the backbone over a ``DiffusionBatch``, the LM head only at the masked positions.

Scoring only the masked positions skips almost all of the 151,936-column head (feasibility_ml.md §5). The
module wraps the model so that DDP sees the whole forward (calling ``model.model`` past a DDP wrapper would
bypass its gradient hooks).
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.training.collate import DiffusionBatch


class MaskedLogits(torch.nn.Module):
    """``forward(batch) -> (n, V)`` float32 logits at ``batch.loss_mask`` positions, in row-major order."""

    def __init__(self, model: Qwen3VLForConditionalGeneration) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: DiffusionBatch, teacher_mask: bool = False) -> torch.Tensor:
        """Logits of the masked positions.

        Args:
            batch: the batch, on the model's device.
            teacher_mask: attend with ``batch.teacher_attention_mask`` (the teacher's block size).

        Returns:
            (n, V) float32, n = ``batch.loss_mask.sum()``; position j predicts token j (no shift).
        """
        mask = batch.teacher_attention_mask if teacher_mask else batch.attention_mask
        vision = {}
        if batch.pixel_values is not None:
            vision = {"pixel_values": batch.pixel_values, "image_grid_thw": batch.image_grid_thw}
        out = self.model.model(
            input_ids=batch.input_ids,
            attention_mask=mask,
            position_ids=batch.position_ids,
            mm_token_type_ids=batch.mm_token_type_ids,
            use_cache=False,
            **vision,
        )
        hidden = out.last_hidden_state[batch.loss_mask]  # (n, H)
        return head_logits(self.model, hidden[None])[0]


def masked_targets(batch: DiffusionBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(labels (n,), mask ratio t (n,), batch row (n,)) of the masked positions, in ``MaskedLogits`` order."""
    rows = batch.loss_mask.nonzero()[:, 0]
    return batch.labels[batch.loss_mask], batch.noise_level[batch.loss_mask], rows
