"""FlashInfer's page table (host side, testable without FlashInfer): groups, short ends, shared prompt."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.attention.flashinfer import kernels, page_table


def _requests(
    qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, indices: torch.Tensor
) -> list[tuple[int, list]]:
    # (queries, pages) of each request.
    return [
        (int(qo_indptr[i + 1] - qo_indptr[i]), indices[kv_indptr[i] : kv_indptr[i + 1]].tolist())
        for i in range(len(qo_indptr) - 1)
    ]


def test_fused_forward_rows_read_the_prompt_from_row_0_and_their_answer_from_their_own_row():
    # 3 rows of 40 slots, B = 4, prompt of 10 slots, a fused forward of 2 groups from slot 10.
    requests = _requests(*page_table(rows=3, max_len=40, block_size=4, start=10, length=8, shared=10))
    prompt = list(range(10))
    for row in range(3):
        first, second = requests[2 * row], requests[2 * row + 1]
        own = [row * 40 + slot for slot in range(10, 18)]
        assert first == (4, prompt + own[:4])  # the committed block does not see the new one
        assert second == (4, prompt + own)


def test_prompt_prefill_has_a_short_last_group_and_no_sharing():
    requests = _requests(*page_table(rows=1, max_len=40, block_size=4, start=0, length=10, shared=0))
    assert requests == [(4, list(range(4))), (4, list(range(8))), (2, list(range(10)))]


def test_one_row_splits_the_keys_and_several_rows_leave_the_choice_to_flashinfer():
    # One row's block is too little work for FA3's unsplit kernels on Hopper; K rows give it enough.
    assert kernels(1) == "fa2"
    assert kernels(8) == "auto"
