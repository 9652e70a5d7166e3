"""Losses on masked positions: 1/t-weighted cross-entropy and the symmetric Jensen-Shannon divergence.

Both take logits already gathered at the masked positions (n of them, in batch order) and normalise as the
reference does (docs/REFERENCE.md §3.1-3.2): per sample, the sum over its masked positions
divided by its padded answer length R_s; then the sum over samples divided by the samples of the whole
optimizer step. Gathering and the model call live in ``forward.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOG_FLOOR = 1e-8  # log M is taken of max(M, 1e-8) (reference kd_loss.py:458-474)


def _per_sample(
    values: torch.Tensor, sample_index: torch.Tensor, response_lens: torch.Tensor
) -> torch.Tensor:
    """(b,) per-sample sums of ``values`` (n,) divided by each sample's padded answer length."""
    sums = torch.zeros(len(response_lens), dtype=values.dtype, device=values.device)
    return sums.index_add(0, sample_index, values) / response_lens.to(values)


def weighted_masked_ce(
    logits: torch.Tensor,
    labels: torch.Tensor,
    noise_level: torch.Tensor,
    sample_index: torch.Tensor,
    response_lens: torch.Tensor,
    num_samples: int,
) -> torch.Tensor:
    """MDLM/BD3-LM NELBO estimate: sum_s (1/R_s) sum_{j masked in s} CE_j / t_j, over ``num_samples``.

    Args:
        logits: (n, V) logits at the masked positions (no logit shift: position j predicts token j).
        labels: (n,) clean tokens at those positions.
        noise_level: (n,) mask ratio t of each position's block.
        sample_index: (n,) batch row of each position.
        response_lens: (b,) padded answer length R_s of each row.
        num_samples: samples in the optimizer step on this rank (the reference divides by the global count;
            DDP's gradient average supplies the division by the world size).

    Returns:
        Scalar float32 loss.
    """
    ce = F.cross_entropy(logits.float(), labels, reduction="none") / noise_level.float()
    return _per_sample(ce, sample_index, response_lens).sum() / num_samples


def _kl_terms(p: torch.Tensor, log_p: torch.Tensor, log_m: torch.Tensor) -> torch.Tensor:
    """(n,) sum_v p (log p - log m), where p = 0 adds 0: a reduced vocabulary's -inf columns (0 x -inf is
    NaN in floating point)."""
    return torch.where(p > 0, p * (log_p - log_m), 0.0).sum(-1)


def symmetric_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    sample_index: torch.Tensor,
    response_lens: torch.Tensor,
    num_samples: int,
    *,
    beta: float = 0.5,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Jensen-Shannon divergence between teacher and student on masked positions, no 1/t weight.

    With P_S = softmax(z_S / T), P_T = softmax(z_T / T) (teacher detached) and M = beta P_T + (1 - beta) P_S,
    each position contributes beta KL(P_T || M) + (1 - beta) KL(P_S || M); the reduction is that of
    ``weighted_masked_ce`` and the result is multiplied by T^2 (reference kd_loss.py:326-486).

    Args:
        student_logits: (n, V) student logits at the masked positions.
        teacher_logits: (n, V) teacher logits at the same positions.
        sample_index: (n,) batch row of each position.
        response_lens: (b,) padded answer lengths.
        num_samples: samples in the optimizer step on this rank.
        beta: teacher weight in the mixture (0.5 = symmetric).
        temperature: softmax temperature T.

    Returns:
        Scalar float32 loss.
    """
    log_ps = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_pt = F.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    ps, pt = log_ps.exp(), log_pt.exp()
    log_m = (beta * pt + (1.0 - beta) * ps).clamp_min(LOG_FLOOR).log()
    per_token = beta * _kl_terms(pt, log_pt, log_m) + (1.0 - beta) * _kl_terms(ps, log_ps, log_m)
    loss = _per_sample(per_token, sample_index, response_lens).sum() / num_samples
    return loss * temperature**2


def top_k_overlap(student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int = 5) -> torch.Tensor:
    """Mean fraction of the teacher's top-k tokens that are also in the student's top-k (paper: top-5).

    Args:
        student_logits: (n, V).
        teacher_logits: (n, V).
        k: how many top tokens to compare.

    Returns:
        0-d tensor: the overlap in [0, 1], NaN when there are no positions (read it after the backward is
        queued: reading it waits for the device).
    """
    student = student_logits.detach().topk(k, dim=-1).indices  # (n, k)
    teacher = teacher_logits.topk(k, dim=-1).indices
    hits = (student[:, :, None] == teacher[:, None, :]).any(-1).float()  # (n, k)
    return hits.mean()  # the mean of nothing is NaN
