"""Greedy and seeded temperature sampling of x0 and its confidence, per row, with no host sync.

The uniforms are counter-based (a splitmix64 hash of row seed, draw number and position), not drawn from
``torch.Generator`` state: the same integer ops give the same bits on the CPU and on a GPU, inside or outside
a CUDA graph, so the host loop, the device loop and their graphs sample identically, and a row's draws depend
on nothing but its seed and how many steps it has taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# splitmix64 (Steele, Lea, Flood 2014) constants as signed int64: torch's int64 multiply wraps around.
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_MAX_WIDTH = 1 << 16  # positions per draw (a block is at most 64)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def uniforms(seeds: torch.Tensor, draw: torch.Tensor | int, width: int) -> torch.Tensor:
    """(K, width) float64 uniforms in (0, 1) of draw number ``draw`` of each row's seed (never 0: the
    inverse CDF would then pick a leading token of probability 0).

    Args:
        seeds: (K,) int64 row seeds.
        draw: which draw (a step counter; a 0-dim int64 tensor inside CUDA graphs).
        width: uniforms per row (the block size).
    """
    positions = torch.arange(width, dtype=torch.int64, device=seeds.device)
    counter = draw * _MAX_WIDTH + positions + 1  # splitmix64 maps 0 to 0: no counter is 0
    key = _mix((seeds[:, None] + 1) * _GOLDEN + counter)  # (K, width)
    return (_shift_right(_mix(key + _GOLDEN), 11).double() + 0.5) * 2.0**-53


@dataclass(frozen=True)
class RowSampling:
    """How each candidate row picks x0: its temperature (0 = argmax) and seed.

    Attributes:
        temperatures: (K,) float32 on the decoding device.
        seeds: (K,) int64 on the decoding device.
        greedy: every temperature is 0 (no uniforms are drawn at all).
    """

    temperatures: torch.Tensor
    seeds: torch.Tensor
    greedy: bool

    @classmethod
    def of(
        cls, temperature: float, seed: int, rows: int, greedy_first: bool, device: torch.device | str = "cpu"
    ) -> RowSampling:
        """Row k samples at ``temperature`` with seed ``seed + k``; with ``greedy_first`` row 0 is argmax."""
        temperatures = [0.0 if (greedy_first and k == 0) else temperature for k in range(rows)]
        return cls(
            torch.tensor(temperatures, dtype=torch.float32, device=device),
            torch.tensor([seed + k for k in range(rows)], dtype=torch.int64, device=device),
            not any(t > 0 for t in temperatures),
        )


def sample_tokens(
    logits: torch.Tensor, sampling: RowSampling, draw: torch.Tensor | int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate tokens x0 and their probabilities (the commit rules' confidence).

    Args:
        logits: (K, B, V) float32; disallowed tokens already at -inf.
        sampling: per-row temperatures and seeds. A row at temperature 0 takes the argmax; a row at T > 0
            inverse-CDF samples softmax(logits / T), as the reference's ``sample_tokens``
            (modeling_wam_diff2.py:2059-2129).
        draw: draw number (steps taken so far); every call with T > 0 reads B uniforms per row.

    Returns:
        (x0 (K, B) int64, confidence (K, B) float32, probability (K, B) float32): confidence is x0's
        probability under the distribution it was drawn from (the commit rules rank by it), probability its
        probability under softmax(logits) (the model's, after the grammar: what the answer reports). At
        temperature 0 the two are the same.
    """
    probs = torch.softmax(logits, dim=-1)
    confidence, x0 = probs.max(dim=-1)
    if sampling.greedy:
        return x0, confidence, confidence
    sampled = sampling.temperatures > 0
    scale = torch.where(sampled, sampling.temperatures, 1.0)[:, None, None]
    tempered = torch.softmax(logits / scale, dim=-1)
    uniform = uniforms(sampling.seeds, draw, logits.shape[1]).to(logits.device)  # (K, B)
    # float64 cumulative sum: in float32 the CDF over 151,936 entries drifts enough to pick ids of zero
    # probability.
    cdf = tempered.double().cumsum(dim=-1)
    drawn = torch.searchsorted(cdf, (uniform * cdf[..., -1]).unsqueeze(-1)).squeeze(-1)
    drawn = drawn.clamp_max(logits.shape[-1] - 1)
    drawn_confidence = tempered.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
    drawn_probability = probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
    row = sampled[:, None]
    return (
        torch.where(row, drawn, x0),
        torch.where(row, drawn_confidence, confidence),
        torch.where(row, drawn_probability, confidence),
    )
