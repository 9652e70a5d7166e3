"""Commit (remasking) rules: which masked positions of a block take their x0 this step. Pure tensor functions.

Reference: modeling_wam_diff2.py:2436-2488 and ``get_num_transfer_tokens`` (:2132-2140).
"""

from __future__ import annotations

import torch


def transfer_schedule(block_size: int, steps: int) -> list[int]:
    """Tokens to commit at each step so that a block of B finishes in exactly ``min(steps, B)`` steps.

    An even split; the first ``B mod steps`` steps take one more (reference ``get_num_transfer_tokens``).
    """
    steps = min(steps, block_size)
    base, extra = divmod(block_size, steps)
    return [base + (1 if step < extra else 0) for step in range(steps)]


def _top_k_masked(score: torch.Tensor, masked: torch.Tensor, count: int) -> torch.Tensor:
    # Unmasked positions score -inf so they are never chosen; ties go to the lower index (stable sort).
    score = score.masked_fill(~masked, float("-inf"))
    order = torch.sort(score, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(score.shape[-1], device=score.device).expand_as(order))
    limit = masked.sum(-1, keepdim=True).clamp_max(count)  # no host-made tensor: safe in a CUDA graph
    return (rank < limit) & masked


def low_confidence_dynamic(confidence: torch.Tensor, masked: torch.Tensor, threshold: float) -> torch.Tensor:
    """Every masked position with confidence >= threshold; a row with none commits its single best position.

    Args:
        confidence: (K, B) x0 probabilities.
        masked: (K, B) bool, still-masked positions.
        threshold: e.g. 0.9.

    Returns:
        (K, B) bool positions to commit (empty for a row without masks).
    """
    above = masked & (confidence >= threshold)
    best = _top_k_masked(confidence, masked, 1)
    return torch.where(above.any(-1, keepdim=True), above, best)


def low_confidence_static(confidence: torch.Tensor, masked: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` most confident masked positions of each row (fewer if fewer remain)."""
    return _top_k_masked(confidence, masked, count)


def sequential(masked: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` left-most masked positions of each row."""
    position_score = -torch.arange(masked.shape[-1], dtype=torch.float32, device=masked.device)
    return _top_k_masked(position_score.expand(masked.shape), masked, count)


def select(
    rule: str, confidence: torch.Tensor, masked: torch.Tensor, threshold: float, count: int | None
) -> torch.Tensor:
    """(K, B) positions ``rule`` commits this step (``count``: the schedule's, unused by the dynamic rule)."""
    if rule == "low_confidence_dynamic":
        return low_confidence_dynamic(confidence, masked, threshold)
    if rule == "low_confidence_static":
        return low_confidence_static(confidence, masked, count)
    return sequential(masked, count)


def priority(confidence: torch.Tensor, rule: str) -> torch.Tensor:
    """(K, B) score whose descending order is the rule's preference among positions (for grammar repair)."""
    if rule == "sequential":
        return -torch.arange(
            confidence.shape[-1], dtype=confidence.dtype, device=confidence.device
        ).expand_as(confidence)
    return confidence
