"""Block-causal attention masks for inference and for the [prefix | clean | noisy] training layout.

Masks are boolean, True = may attend, shaped for SDPA (transformers passes a 4D mask through unchanged). Rules
are the reference's (docs/REFERENCE.md §1.5): block ids count B-sized chunks of the prompt from position 0,
response blocks start at the prompt end, and query q sees key k iff block(q) >= block(k).
"""

from __future__ import annotations

import math

import torch

from wamdiff2_ros.errors import InputError

PREFIX, CLEAN, NOISY = 0, 1, 2  # token types of the training layout (reference collate_fns.py:1222-1225)


def _check_sizes(block_size: int, *lengths: int) -> None:
    if block_size < 1:
        raise InputError(f"block_size must be at least 1, got {block_size}")
    if any(length < 0 for length in lengths):
        raise InputError(f"lengths must be non-negative, got {lengths}")


def inference_block_ids(prompt_len: int, total_len: int, block_size: int) -> torch.Tensor:
    """Block id of every position of [prompt | response] at inference.

    Args:
        prompt_len: P, prompt tokens (vision included).
        total_len: P plus response positions.
        block_size: B.

    Returns:
        (total_len,) int64: ``pos // B`` in the prompt, ``ceil(P / B) + (pos - P) // B`` in the response (the
        response is not aligned to multiples of B in absolute position; reference
        modeling_wam_diff2.py:2184-2204).
    """
    _check_sizes(block_size, prompt_len, total_len - prompt_len)
    pos = torch.arange(total_len)
    response = math.ceil(prompt_len / block_size) + (pos - prompt_len) // block_size
    return torch.where(pos < prompt_len, pos // block_size, response)


def block_causal_mask(query_block_ids: torch.Tensor, key_block_ids: torch.Tensor) -> torch.Tensor:
    """(Lq, Lk) bool: query q sees key k iff block(q) >= block(k)."""
    return query_block_ids[:, None] >= key_block_ids[None, :]


def inference_mask(
    prompt_len: int,
    total_len: int,
    block_size: int,
    *,
    query_start: int = 0,
    batch: int = 1,
) -> torch.Tensor:
    """SDPA mask for queries ``[query_start, total_len)`` over keys ``[0, total_len)``.

    With ``query_start = 0`` this is the full-sequence mask; with ``query_start`` at a cache length it is the
    mask of a cached forward (past keys come from the cache, in order).

    Args:
        prompt_len: P.
        total_len: keys up to here.
        block_size: B.
        query_start: first query position.
        batch: leading batch size.

    Returns:
        (batch, 1, total_len - query_start, total_len) bool.
    """
    ids = inference_block_ids(prompt_len, total_len, block_size)
    mask = block_causal_mask(ids[query_start:], ids)
    return mask[None, None].expand(batch, 1, *mask.shape)


def training_layout(prefix_len: int, response_len: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block ids and token types of [prefix P | clean response R | noisy response R].

    Args:
        prefix_len: P.
        response_len: R, already padded (with <|im_end|>) to a multiple of B.
        block_size: B.

    Returns:
        (block_ids, token_types), each (P + 2R,) int64; the noisy copy of response block i shares the clean
        copy's id ``ceil(P / B) + i`` (reference collate_fns.py:1227-1240).

    Raises:
        InputError: R is not a multiple of B, or sizes are invalid.
    """
    _check_sizes(block_size, prefix_len, response_len)
    if response_len % block_size:
        raise InputError(
            f"response length {response_len} must be padded to a multiple of block size {block_size}"
        )
    prefix_ids = torch.arange(prefix_len) // block_size
    response_ids = math.ceil(prefix_len / block_size) + torch.arange(response_len) // block_size
    block_ids = torch.cat([prefix_ids, response_ids, response_ids])
    token_types = torch.cat(
        [
            torch.full((prefix_len,), PREFIX),
            torch.full((response_len,), CLEAN),
            torch.full((response_len,), NOISY),
        ]
    )
    return block_ids, token_types


def training_mask(
    prefix_len: int,
    response_len: int,
    block_size: int,
    *,
    clean_sees_noisy: bool = False,
) -> torch.Tensor:
    """(L, L) bool mask of the training layout, L = P + 2R.

    Rules (reference modeling_wam_diff2.py:150-208): a prefix query sees prefix keys of its block or
    earlier; a clean query sees the whole prefix and clean keys of its block or earlier; a noisy query sees
    the whole prefix, clean keys of strictly earlier blocks and noisy keys of its own block.

    Args:
        prefix_len: P.
        response_len: R, a multiple of B.
        block_size: B.
        clean_sees_noisy: ``True`` reproduces the reference SFT collator (collate_fns.py:1080-1086), where
            every non-noisy query also sees noisy keys of its block or earlier (pitfall 1 of docs/REFERENCE.md
            §5).

    Returns:
        The mask.
    """
    ids, types = training_layout(prefix_len, response_len, block_size)
    q_ids, k_ids = ids[:, None], ids[None, :]
    q_types, k_types = types[:, None], types[None, :]
    not_noisy_key = k_types != NOISY
    plain = (q_ids >= k_ids) & (not_noisy_key | clean_sees_noisy)  # prefix and clean queries
    noisy = (
        (k_types == PREFIX) | ((k_types == CLEAN) & (k_ids < q_ids)) | ((k_types == NOISY) & (k_ids == q_ids))
    )
    return torch.where(q_types == NOISY, noisy, plain)


def training_mask_batch(
    prefix_lens: list[int],
    response_lens: list[int],
    block_size: int,
    total_len: int,
    *,
    clean_sees_noisy: bool = False,
) -> torch.Tensor:
    """Batched training masks, each sample's layout left-aligned and padded to ``total_len``.

    Padding keys are invisible to every query. A padding query sees only itself: an all-False SDPA row
    gives NaN, which would reach the gradients through 0 * NaN even though the loss ignores those positions.

    Returns:
        (batch, 1, total_len, total_len) bool.

    Raises:
        InputError: a sample does not fit in ``total_len`` or the lists differ in length.
    """
    if len(prefix_lens) != len(response_lens):
        raise InputError("prefix_lens and response_lens must have the same length")
    out = torch.eye(total_len, dtype=torch.bool).repeat(len(prefix_lens), 1, 1, 1)
    for row, (prefix_len, response_len) in enumerate(zip(prefix_lens, response_lens, strict=True)):
        length = prefix_len + 2 * response_len
        if length > total_len:
            raise InputError(f"sample {row} has {length} tokens, more than total_len {total_len}")
        out[row, 0, :length, :length] = training_mask(
            prefix_len, response_len, block_size, clean_sees_noisy=clean_sees_noisy
        )
    return out
