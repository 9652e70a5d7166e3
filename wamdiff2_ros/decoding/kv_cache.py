"""Exact KV cache for block-causal decoding: prefill once, denoise without writing, write committed blocks.

The cache holds K/V of committed tokens only, each computed under exactly the visibility it has in one full
block-causal forward (its block and every earlier one), so cached logits equal the full forward's. It wraps
transformers' ``DynamicCache``: a denoising forward appends the block's K/V and the append is cropped away,
which leaves the cache as it was (transformers' attention always appends; cropping is the read-only mode).
Knows nothing about tokens, sampling or commit rules.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, Qwen3VLForConditionalGeneration

from wamdiff2_ros.model.masks import inference_mask
from wamdiff2_ros.model.positions import prompt_positions, response_positions
from wamdiff2_ros.model.prompt import PromptTensors


class BlockCache:
    """A model plus the KV cache of [prompt | committed answer blocks], for K rows decoding the same prompt.

    Args:
        model: the Qwen3-VL model (eval mode, SDPA).
        block_size: B; the prompt is encoded block-causally in B-sized chunks from position 0, so the
            prompt cache depends on B (reference pitfall 5).
        rows: K candidate rows sharing the prompt.
    """

    fp8_head = None  # the model's own LM head scores (``StaticBlockCache.fp8_head``)

    def __init__(self, model: Qwen3VLForConditionalGeneration, block_size: int, rows: int = 1) -> None:
        self.model = model
        self.block_size = block_size
        self.rows = rows
        self.forwards = 0
        self.prompt_len = 0
        self.rope_delta = 0
        self.cache = DynamicCache(config=model.config)

    @property
    def written(self) -> int:
        """Answer tokens whose K/V are in the cache."""
        return self.cache.get_seq_length() - self.prompt_len

    def _run(self, input_ids: torch.Tensor, start: int, mask: torch.Tensor, keep: int) -> torch.Tensor:
        # input_ids: (K, n) answer tokens from answer offset ``start``; returns (K, keep, H) final hidden
        # states: the caller applies the LM head to the columns it needs (model/forward.py head_logits).
        positions = response_positions(self.prompt_len, self.rope_delta, start, input_ids.shape[1], self.rows)
        out = self.model.model(
            input_ids=input_ids.to(self.model.device),
            position_ids=positions.to(self.model.device),
            attention_mask=mask.to(self.model.device),
            cache=self.cache,
            use_cache=True,
        )
        self.forwards += 1
        return out.last_hidden_state[:, input_ids.shape[1] - keep :]

    @torch.no_grad()
    def prefill(self, prompt: PromptTensors) -> None:
        """Encode the prompt (image included) once under the block-causal mask and share it across the K rows.

        No logits: the first answer block is scored by its own forward (no logit shift).
        """
        device = self.model.device
        positions, self.rope_delta = prompt_positions(self.model, prompt)
        self.prompt_len = prompt.length
        vision = {}
        if prompt.pixel_values is not None:
            vision = {
                "pixel_values": prompt.pixel_values.to(device, self.model.dtype),
                "image_grid_thw": prompt.image_grid_thw.to(device),
            }
        self.model.model(
            input_ids=prompt.input_ids.to(device),
            mm_token_type_ids=prompt.mm_token_type_ids.to(device),
            position_ids=positions.to(device),
            attention_mask=inference_mask(prompt.length, prompt.length, self.block_size).to(device),
            cache=self.cache,
            use_cache=True,
            **vision,
        )
        self.forwards += 1
        if self.rows > 1:
            self.cache.batch_repeat_interleave(self.rows)

    @torch.no_grad()
    def denoise(self, block: torch.Tensor) -> torch.Tensor:
        """Final hidden states of the next block (masks included) over the cache; the cache is left unchanged.

        Args:
            block: (K, B) tokens of the block that starts at answer offset ``written``.

        Returns:
            (K, B, H) hidden states; ``head_logits`` turns them into logits (position i scores token i).
        """
        past = self.cache.get_seq_length()
        size = block.shape[1]
        mask = inference_mask(
            self.prompt_len, past + size, self.block_size, query_start=past, batch=self.rows
        )
        hidden = self._run(block, self.written, mask, size)
        self.cache.crop(-size)
        return hidden

    @torch.no_grad()
    def write(self, block: torch.Tensor) -> None:
        """Append a committed block's K/V (the reference's extra clean forward,
        modeling_wam_diff2.py:2529-2544)."""
        past = self.cache.get_seq_length()
        size = block.shape[1]
        mask = inference_mask(
            self.prompt_len, past + size, self.block_size, query_start=past, batch=self.rows
        )
        self._run(block, self.written, mask, 1)

    @torch.no_grad()
    def write_and_denoise(self, committed: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        """Fused order: append ``committed`` and get the next ``block``'s hidden states in one forward.

        The committed rows see the cache and their own block only (block-causal), exactly as in ``write``; the
        new block sees the cache, the committed block and itself, exactly as in ``denoise`` after ``write``.

        Args:
            committed: (K, B) final tokens of the block at answer offset ``written``.
            block: (K, B) tokens of the next block.

        Returns:
            (K, B, H) hidden states of ``block``; the cache then holds ``committed`` but not ``block``.
        """
        past = self.cache.get_seq_length()
        size = committed.shape[1] + block.shape[1]
        mask = inference_mask(
            self.prompt_len, past + size, self.block_size, query_start=past, batch=self.rows
        )
        hidden = self._run(torch.cat([committed, block], dim=1), self.written, mask, block.shape[1])
        self.cache.crop(-block.shape[1])
        return hidden
