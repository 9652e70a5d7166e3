"""The left-most masked positions, on the static rule's schedule (left to right, as AR decodes)."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.commit_rules.base import CommitRule, register, top_k_masked, transfer_schedule


def _left_first(like: torch.Tensor) -> torch.Tensor:
    return -torch.arange(like.shape[-1], dtype=torch.float32, device=like.device).expand(like.shape)


def sequential(masked: torch.Tensor, count: int) -> torch.Tensor:
    """(K, B) the ``count`` left-most masked positions of each row."""
    return top_k_masked(_left_first(masked), masked, count)


@register
class Sequential(CommitRule):
    name = "sequential"

    def schedule(self, block_size, steps):
        return transfer_schedule(block_size, steps)

    def select(self, confidence, masked, threshold, count):
        return sequential(masked, count)

    def priority(self, confidence):
        return _left_first(confidence).to(confidence.dtype)
