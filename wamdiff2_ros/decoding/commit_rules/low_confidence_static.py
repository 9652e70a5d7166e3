"""The most confident masked positions, on an even schedule that ends the block in ``steps`` steps."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.commit_rules.base import CommitRule, register, top_k_masked, transfer_schedule


def low_confidence_static(confidence: torch.Tensor, masked: torch.Tensor, count: int) -> torch.Tensor:
    """(K, B) the ``count`` most confident masked positions of each row (fewer if fewer remain)."""
    return top_k_masked(confidence, masked, count)


@register
class LowConfidenceStatic(CommitRule):
    name = "low_confidence_static"

    def schedule(self, block_size, steps):
        return transfer_schedule(block_size, steps)

    def select(self, confidence, masked, threshold, count):
        return low_confidence_static(confidence, masked, count)
