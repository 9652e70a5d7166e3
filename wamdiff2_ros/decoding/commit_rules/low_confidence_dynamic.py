"""Every masked position at or above the confidence threshold; a row with none commits its best one."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.commit_rules.base import CommitRule, register, top_k_masked


def low_confidence_dynamic(confidence: torch.Tensor, masked: torch.Tensor, threshold: float) -> torch.Tensor:
    """(K, B) masked positions with confidence >= ``threshold`` (e.g. 0.9), or each row's single best;
    nothing for a row without masks."""
    above = masked & (confidence >= threshold)
    best = top_k_masked(confidence, masked, 1)
    return torch.where(above.any(-1, keepdim=True), above, best)


@register
class LowConfidenceDynamic(CommitRule):
    name = "low_confidence_dynamic"

    def select(self, confidence, masked, threshold, count):
        return low_confidence_dynamic(confidence, masked, threshold)
