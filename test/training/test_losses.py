"""The 1/t-weighted CE and the symmetric JSD equal plain re-computations on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch

from wamdiff2_ros.training.losses import symmetric_jsd, top_k_overlap, weighted_masked_ce

# Three masked positions in sample 0, one in sample 1; padded answer lengths 8 and 4; a 5-token vocabulary.
LOGITS = torch.tensor(
    [
        [2.0, 0.5, -1.0, 0.0, 0.3],
        [0.1, 0.2, 0.3, 0.4, 0.5],
        [-3.0, 4.0, 0.0, 1.0, -1.0],
        [1.5, -0.5, 2.5, 0.0, 0.0],
    ]
)
TEACHER = torch.tensor(
    [
        [1.0, 1.0, 0.0, -2.0, 0.5],
        [3.0, -1.0, 0.0, 0.0, 0.5],
        [-1.0, 2.0, 2.0, 0.0, 0.0],
        [0.0, 0.0, 4.0, -4.0, 1.0],
    ]
)
LABELS = torch.tensor([0, 4, 1, 2])
NOISE = torch.tensor([0.25, 0.25, 0.75, 0.5])
ROWS = torch.tensor([0, 0, 0, 1])
RESPONSE_LENS = torch.tensor([8, 4])


def _softmax(row: list[float], temperature: float = 1.0) -> list[float]:
    exps = [math.exp(v / temperature) for v in row]
    return [e / sum(exps) for e in exps]


def test_weighted_ce_equals_plain_sum_of_ce_over_t_per_answer_length():
    expected = 0.0
    for j in range(4):
        p = _softmax(LOGITS[j].tolist())
        expected += -math.log(p[LABELS[j]]) / float(NOISE[j]) / int(RESPONSE_LENS[ROWS[j]])
    expected /= 3  # samples in the optimizer step (a third sample had no masked position)
    got = weighted_masked_ce(LOGITS, LABELS, NOISE, ROWS, RESPONSE_LENS, num_samples=3)
    assert float(got) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("beta", "temperature"), [(0.5, 1.0), (0.3, 2.0)], ids=["symmetric", "beta0.3-T2"])
def test_jsd_equals_plain_mixture_kl(beta, temperature):
    expected = 0.0
    for j in range(4):
        ps = _softmax(LOGITS[j].tolist(), temperature)
        pt = _softmax(TEACHER[j].tolist(), temperature)
        m = [beta * t + (1 - beta) * s for s, t in zip(ps, pt, strict=True)]
        kl_t = sum(t * math.log(t / mi) for t, mi in zip(pt, m, strict=True))
        kl_s = sum(s * math.log(s / mi) for s, mi in zip(ps, m, strict=True))
        expected += (beta * kl_t + (1 - beta) * kl_s) / int(RESPONSE_LENS[ROWS[j]])
    expected = expected / 2 * temperature**2
    got = symmetric_jsd(LOGITS, TEACHER, ROWS, RESPONSE_LENS, 2, beta=beta, temperature=temperature)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_jsd_is_zero_for_identical_logits_and_sends_no_gradient_to_the_teacher():
    teacher = LOGITS.clone().requires_grad_(True)
    student = LOGITS.clone().requires_grad_(True)
    loss = symmetric_jsd(student, teacher, ROWS, RESPONSE_LENS, 2)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-7)
    assert teacher.grad is None
    assert student.grad is not None


def test_top_k_overlap_counts_shared_tokens():
    student = torch.tensor([[5.0, 4.0, 3.0, 0.0, 0.0]])  # top-2 {0, 1}
    teacher = torch.tensor([[5.0, 0.0, 4.0, 0.0, 0.0]])  # top-2 {0, 2}
    assert float(top_k_overlap(student, teacher, k=2)) == pytest.approx(0.5)
    assert float(top_k_overlap(student, student, k=3)) == pytest.approx(1.0)
