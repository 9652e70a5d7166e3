"""Static KV cache for block decoding: buffers allocated once, prompt prefilled once, blocks written in place.

``kv_buffers.StaticKVCache`` owns the buffers (gpt-fast's KVCache idea: callers pass slots, forward never
allocates).
``StaticBlockCache`` offers the methods of ``kv_cache.BlockCache`` (prefill, denoise, write,
write_and_denoise), so the block decoder runs over it unchanged; it computes answer blocks with the lean
forward (fast_model.py) and an attention backend (attention/), optionally replaying CUDA graphs
(cuda_graph.py). The prompt's pass is lean too (prefill.py: the lean vision tower, fast_vision.py, and lean
layers, replayed from one graph per prompt length with graphs on) into row 0, then copied to the other rows
unless the backend reads it from row 0 (FlashInfer).
Slots: the prompt occupies [0, P), answer token j slot P + j. A denoising forward writes the block's K/V
into its own slots, which the next forward overwrites: "read-only" is free here.
"""

from __future__ import annotations

import math
import time

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.attention import make_attention
from wamdiff2_ros.decoding.attention import prompt_backend as choose_prompt_backend
from wamdiff2_ros.decoding.attention.base import Attention
from wamdiff2_ros.decoding.cuda_graph import ForwardGraphs, ShapeGraphs
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.decoding.fp8 import Fp8Weight
from wamdiff2_ros.decoding.kv_buffers import StaticKVCache
from wamdiff2_ros.decoding.prefill import PromptInputs, PromptLayouts, prompt_inputs
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import PromptTensors


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def static_max_len(prompt_len: int, max_new_tokens: int, block_size: int) -> int:
    """Slots a decode needs: the prompt, every answer block, and one more block for the fused forward."""
    return prompt_len + (math.ceil(max_new_tokens / block_size) + 1) * block_size


class StaticBlockCache:
    """``BlockCache``'s interface over a static cache, the lean forward and an attention backend.

    Long-lived: buffers (and CUDA graphs) are made once for prompts up to ``max_prompt_len`` and reused by
    every ``prefill``. The prompt is encoded block-causally in B-sized chunks, as ``BlockCache`` does.

    Args:
        model: the transformers model (prompt encoding; weights of the lean forward).
        block_size: B.
        rows: K candidate rows.
        max_prompt_len: longest prompt this cache takes.
        max_new_tokens: answer budget.
        backend: the answer's attention backend (``sdpa``, ``flashinfer`` or ``triton``).
        cuda_graphs: replay one CUDA graph per forward shape instead of launching kernels (CUDA only).
        decoder: a lean decoder to share (built from ``model``, uncompiled, when None).
        vision: a lean vision tower to share (built from ``model``, uncompiled, when None).
        prompt_backend: the prompt's attention backend (None: ``attention.prompt_backend``'s choice for
            ``backend`` on the model's device and each prompt's length).
        prompt_graphs: replay the text prefill from one CUDA graph per prompt length (None: as
            ``cuda_graphs``; the device loop captures whole steps itself but wants these).

    Raises:
        InputError: CUDA graphs asked for on a model that is not on a CUDA device.
    """

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        block_size: int,
        rows: int,
        max_prompt_len: int,
        max_new_tokens: int,
        backend: str = "sdpa",
        cuda_graphs: bool = False,
        decoder: LeanDecoder | None = None,
        vision: LeanVision | None = None,
        prompt_backend: str | None = None,
        prompt_graphs: bool | None = None,
    ) -> None:
        prompt_graphs = cuda_graphs if prompt_graphs is None else prompt_graphs
        if (cuda_graphs or prompt_graphs) and model.device.type != "cuda":
            raise InputError(f"CUDA graphs need a CUDA model, got device {model.device}")
        self.model = model
        self.block_size = block_size
        self.rows = rows
        self.max_prompt_len = max_prompt_len
        self.decoder = decoder or LeanDecoder(model)
        self.vision = vision or LeanVision(model)
        self.layouts = PromptLayouts(model)  # a frame's positions and rotary tables, made once per layout
        self.cache = StaticKVCache.allocate(
            self.decoder.num_layers,
            rows,
            static_max_len(max_prompt_len, max_new_tokens, block_size),
            self.decoder.kv_heads,
            self.decoder.head_dim,
            model.dtype,
            model.device,
        )
        # Answer forwards always plan as captured ones do (fixed buffers, a wrapper per query count), with or
        # without graphs: FlashInfer's split of the keys then cannot differ between a graphed decode and its
        # ungraphed twin, so the two give the same bits.
        self.attention = make_attention(backend, self.cache, block_size, True, self.decoder.heads)
        self.backend, self.fixed_prompt_backend = backend, prompt_backend
        self.prompt_attentions: dict[str, Attention] = {}  # by backend name, made when a prompt needs one
        self.prompt_attention = self._prompt_attention(max_prompt_len)
        self.start = torch.zeros((), dtype=torch.int64, device=model.device)  # first slot of the next forward
        # M-RoPE offset of the current prompt, read by graphs at replay (it depends on the image grid).
        self.position_offset = torch.zeros((), dtype=torch.int64, device=model.device)
        self.forwards = 0
        self.prompt_len = 0
        self.rope_delta = 0
        self.written = 0  # answer tokens whose K/V are final in the cache
        self.vision_s = 0.0  # the last prefill's vision tower (with its inputs' build)
        self.graphs = None
        self.prompt_graphs = None  # the text prefill, one graph per (prompt length, image tokens)
        if cuda_graphs:
            self.graphs = ForwardGraphs(self.raw_forward)
        if prompt_graphs:
            self.prompt_graphs = ShapeGraphs(self._raw_prefill_text)

    @property
    def fp8_head(self) -> Fp8Weight | None:
        """The lean decoder's FP8 LM head, or None (the model's own head scores: ``fp8.answer_logits``)."""
        return self.decoder.head

    def _prompt_attention(self, length: int) -> Attention:
        """The attention of a prompt of ``length`` tokens, over row 0, planned as captured (a wrapper per
        length, as for the answer's forwards) with or without graphs, so that a graphed prefill and its
        ungraphed twin give the same bits. A prompt graph keeps the one its length chose."""
        device = self.model.device.type
        name = self.fixed_prompt_backend or choose_prompt_backend(self.backend, device, length)
        if name not in self.prompt_attentions:
            self.prompt_attentions[name] = make_attention(
                name, self.cache.first_row(), self.block_size, device == "cuda", self.decoder.heads
            )
        return self.prompt_attentions[name]

    def raw_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(K, n) tokens at slots ``start + [0, n)`` -> (K, n, H) hidden states; no planning, no counting.

        This is what CUDA graphs capture: it reads ``start`` and the backend's plan as they are at replay.
        """
        return self.decoder.forward(tokens, self.start, self.position_offset, self.cache, self.attention)

    def place(self, length: int) -> None:
        """Point the next forward of ``length`` queries at the first unwritten answer slot (host side)."""
        slot = self.prompt_len + self.written
        self.start.fill_(slot)  # a kernel with the value as argument: no host sync
        self.attention.plan(slot, length, self.prompt_len)

    def _run(self, tokens: torch.Tensor, keep: int) -> torch.Tensor:
        tokens = tokens.to(self.model.device)
        self.place(tokens.shape[1])
        hidden = self.graphs(tokens) if self.graphs is not None else self.raw_forward(tokens)
        self.forwards += 1
        return hidden[:, tokens.shape[1] - keep :]

    @torch.no_grad()
    def prefill(self, prompt: PromptTensors) -> None:
        """Encode the prompt (lean vision tower, lean layers) into row 0; SDPA gets a copy per row.

        Raises:
            InputError: the prompt is longer than ``max_prompt_len``.
        """
        if prompt.length > self.max_prompt_len:
            raise InputError(f"prompt of {prompt.length} tokens exceeds max_prompt_len {self.max_prompt_len}")
        started = time.perf_counter()
        inputs = prompt_inputs(self.model, prompt, self.vision, self.layouts)
        _synchronize(self.model.device)
        self.vision_s = time.perf_counter() - started
        self.prefill_text(inputs)
        _synchronize(self.model.device)  # prefill_s is the prefill's own time, not its launch time

    @torch.no_grad()
    def prefill_text(self, inputs: PromptInputs) -> None:
        """The text part of ``prefill``: the prompt's K/V from its text-decoder inputs, into row 0 (and the
        other rows' view of it)."""
        length = inputs.embeds.shape[1]
        self.prompt_attention = self._prompt_attention(length)
        self.prompt_attention.plan(0, length, 0)
        image = () if inputs.visual is None else (inputs.visual, *inputs.deepstack)
        if self.prompt_graphs is not None:
            self.prompt_graphs(inputs.embeds, inputs.cos, inputs.sin, *image)
        else:
            self._raw_prefill_text(inputs.embeds, inputs.cos, inputs.sin, *image)
        if not self.attention.shares_prompt:
            self.cache.share_prompt(length)
        self.prompt_len, self.rope_delta, self.written = length, inputs.rope_delta, 0
        self.position_offset.fill_(inputs.rope_delta)
        self.forwards += 1

    def _raw_prefill_text(
        self, embeds: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *image: torch.Tensor
    ) -> None:
        """The lean layers over the prompt into row 0 (what a prompt graph captures): ``image`` is the image
        tokens' indices and their DeepStack features, or nothing for a text-only prompt."""
        visual, deepstack = (image[0], image[1:]) if image else (None, ())
        inputs = PromptInputs(embeds, cos, sin, visual, deepstack, rope_delta=0)
        row = self.cache.first_row()
        self.decoder.prefill(
            embeds, cos, sin, row.keys, row.values, self.prompt_attention, inputs.add_deepstack
        )

    @torch.no_grad()
    def denoise(self, block: torch.Tensor) -> torch.Tensor:
        """(K, B, H) hidden states of the block at answer offset ``written``; ``written`` is unchanged."""
        return self._run(block, block.shape[1])

    @torch.no_grad()
    def write(self, block: torch.Tensor) -> None:
        """Make a committed block's K/V final (the reference's extra clean forward)."""
        self._run(block, 1)
        self.written += block.shape[1]

    @torch.no_grad()
    def write_and_denoise(self, committed: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        """Fused order: write ``committed`` and return the next ``block``'s hidden states in one forward.

        The attention backend keeps the committed queries from seeing the new block (B-sized query groups).
        """
        hidden = self._run(torch.cat([committed.to(block.device), block], dim=1), block.shape[1])
        self.written += committed.shape[1]
        return hidden
