"""Greedy and seeded temperature sampling of x0 and its confidence, per row generator, no host sync."""

from __future__ import annotations

import torch


def make_generators(seeds: list[int], device: torch.device | str = "cpu") -> list[torch.Generator]:
    """One generator per candidate row, so a row's draws do not depend on the other rows of the batch."""
    return [torch.Generator(device=device).manual_seed(seed) for seed in seeds]


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    generators: list[torch.Generator] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate tokens x0 and their probabilities (the commit rules' confidence).

    Args:
        logits: (K, B, V) float32; disallowed tokens already at -inf.
        temperature: 0 = argmax; > 0 = inverse-CDF sampling from softmax(logits / T), as the reference's
            ``sample_tokens`` (modeling_wam_diff2.py:2059-2129).
        generators: one per row (K); needed when temperature > 0. Every call draws B uniforms per row.

    Returns:
        (x0 (K, B) int64, confidence (K, B) float32).
    """
    if temperature == 0.0:
        probs = torch.softmax(logits, dim=-1)
        confidence, x0 = probs.max(dim=-1)
        return x0, confidence
    if generators is None or len(generators) != logits.shape[0]:
        raise ValueError("temperature sampling needs one generator per row")
    probs = torch.softmax(logits / temperature, dim=-1)
    uniform = torch.stack(
        [torch.rand(logits.shape[1], generator=g, device=g.device, dtype=torch.float64) for g in generators]
    ).to(logits.device)  # (K, B)
    # float64 cumulative sum: in float32 the CDF over 151,936 entries drifts enough to pick ids of zero
    # probability.
    cdf = probs.double().cumsum(dim=-1)
    x0 = torch.searchsorted(cdf, (uniform * cdf[..., -1]).unsqueeze(-1)).squeeze(-1)
    x0 = x0.clamp_max(logits.shape[-1] - 1)
    confidence = probs.gather(-1, x0.unsqueeze(-1)).squeeze(-1)
    return x0, confidence
