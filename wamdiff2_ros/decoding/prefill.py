"""Prompt prefill of the fast path: the vision tower and M-RoPE angles, then the lean layers.

The twin is ``kv_cache.BlockCache.prefill`` (transformers' whole forward): the inputs of the text decoder are
built here exactly as ``Qwen3VLModel.forward`` builds them (image features scattered over the image pad
tokens, DeepStack features added after the first layers, 3D positions through the model's own rotary
module); the vision tower is transformers' or the lean one (``fast_vision.LeanVision``, its twin), and the
decoder layers are the lean ones (``fast_model.LeanDecoder.prefill``), writing straight into the static
cache. Image prompts only (no video).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.positions import prompt_positions
from wamdiff2_ros.model.prompt import PromptTensors


@dataclass(frozen=True)
class PromptInputs:
    """What the text decoder takes for a prompt of P tokens."""

    embeds: torch.Tensor  # (1, P, H) token embeddings, image features in place
    cos: torch.Tensor  # (P, 1, D) M-RoPE cos in the model dtype
    sin: torch.Tensor  # (P, 1, D)
    visual: torch.Tensor | None  # (V,) indices of the image tokens; None without an image
    deepstack: tuple[torch.Tensor, ...]  # per early layer, (V, H) features added after that layer
    rope_delta: int  # text after the prompt at slot i has position i + rope_delta

    def add_deepstack(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``x`` (1, P, H) after ``layer`` with that layer's DeepStack features added (transformers'
        ``_deepstack_process``: one add at the image positions)."""
        if layer >= len(self.deepstack):
            return x
        x = x.clone()
        x[:, self.visual] = x[:, self.visual] + self.deepstack[layer]
        return x


@dataclass(frozen=True)
class PromptLayout:
    """What a prompt's text-decoder inputs take from its layout alone (which slots hold image tokens, the
    image grid), not from its token values: transformers' ``get_rope_index`` reads only these."""

    visual: torch.Tensor | None  # (V,) image token indices on the model's device; None without an image
    cos: torch.Tensor  # (P, 1, D) M-RoPE cos in the model dtype
    sin: torch.Tensor  # (P, 1, D)
    rope_delta: int


def prompt_layout(model: Qwen3VLForConditionalGeneration, prompt: PromptTensors) -> PromptLayout:
    """The layout part of ``prompt``'s inputs: M-RoPE positions through the model's own rotary module, the
    image tokens' indices found on the host (the prompt's ids are a host tensor: no device sync).

    Raises:
        InputError: the prompt's image pad tokens and its image grid's features differ in number.
    """
    device, inner = model.device, model.model
    if prompt.image_grid_thw is not None:
        merge = model.config.vision_config.spatial_merge_size
        features = int(prompt.image_grid_thw.prod()) // merge**2
        if int(prompt.mm_token_type_ids.sum()) != features:
            raise InputError(
                f"{int(prompt.mm_token_type_ids.sum())} image pad tokens but {features} image features"
            )
    positions, rope_delta = prompt_positions(model, prompt)
    like = torch.empty(0, dtype=inner.get_input_embeddings().weight.dtype, device=device)
    cos, sin = inner.language_model.rotary_emb(like, positions.to(device))  # (1, P, D) each
    visual = None
    if prompt.pixel_values is not None:
        visual = (prompt.mm_token_type_ids[0].cpu() == 1).nonzero().squeeze(-1).to(device)
    return PromptLayout(visual, cos[0, :, None], sin[0, :, None], rope_delta)


class PromptLayouts:
    """``prompt_layout`` made once per layout. A camera's prompts have a few layouts (the ego state's text
    varies in length, the image grid is the camera's), so a frame's prefill then does no position arithmetic
    on the host (~0.6 ms at 1080p on the 2-core machine) and no kernels for the rotary tables; the oldest
    layout goes when ``capacity`` is reached."""

    def __init__(self, model: Qwen3VLForConditionalGeneration, capacity: int = 16) -> None:
        self.model, self.capacity = model, capacity
        self._layouts: dict[tuple[bytes, tuple[int, ...] | None], PromptLayout] = {}

    def __len__(self) -> int:
        return len(self._layouts)

    def __call__(self, prompt: PromptTensors) -> PromptLayout:
        grid = None if prompt.image_grid_thw is None else tuple(prompt.image_grid_thw.reshape(-1).tolist())
        key = (prompt.mm_token_type_ids.cpu().numpy().tobytes(), grid)
        if key not in self._layouts:
            if len(self._layouts) >= self.capacity:
                del self._layouts[next(iter(self._layouts))]
            self._layouts[key] = prompt_layout(self.model, prompt)
        return self._layouts[key]


@torch.no_grad()
def prompt_inputs(
    model: Qwen3VLForConditionalGeneration,
    prompt: PromptTensors,
    vision: LeanVision | None = None,
    layouts: PromptLayouts | None = None,
) -> PromptInputs:
    """Run the vision tower (``vision``, else transformers') and build the text decoder's inputs (the layout's
    part from ``layouts`` when given). The tower is launched before the host works out the layout, so on a
    GPU the two overlap; with the layout already in ``layouts`` nothing here waits for the device (a new
    layout's upload of its positions does).

    Raises:
        InputError: the prompt's image pad tokens and the image's features differ in number.
    """
    device, inner = model.device, model.model
    embeds = inner.get_input_embeddings()(prompt.input_ids.to(device))  # (1, P, H), before the tower: the
    # ids' upload from pageable memory waits for the stream
    image, deepstack = None, ()
    if prompt.pixel_values is not None:
        if vision is not None:
            features = vision(prompt.pixel_values, prompt.image_grid_thw)
            image, deepstack = features.image, features.deepstack
        else:
            features = inner.get_image_features(
                prompt.pixel_values.to(device, model.dtype), prompt.image_grid_thw.to(device)
            )
            image = torch.cat(features.pooler_output)  # (V, H)
            deepstack = tuple(torch.cat(layer) for layer in features.deepstack_features)
    layout = layouts(prompt) if layouts is not None else prompt_layout(model, prompt)
    if image is not None:
        embeds = embeds.index_copy(1, layout.visual, image.to(embeds.dtype)[None])
        deepstack = tuple(layer.to(embeds.dtype) for layer in deepstack)
    return PromptInputs(embeds, layout.cos, layout.sin, layout.visual, deepstack, layout.rope_delta)
