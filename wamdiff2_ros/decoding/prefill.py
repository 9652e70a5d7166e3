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


@torch.no_grad()
def prompt_inputs(
    model: Qwen3VLForConditionalGeneration, prompt: PromptTensors, vision: LeanVision | None = None
) -> PromptInputs:
    """Run the vision tower (``vision``, else transformers') and build the text decoder's inputs.

    Raises:
        InputError: the prompt's image pad tokens and the image's features differ in number.
    """
    device, inner = model.device, model.model
    input_ids = prompt.input_ids.to(device)
    embeds = inner.get_input_embeddings()(input_ids)  # (1, P, H)
    positions, rope_delta = prompt_positions(model, prompt)
    visual, deepstack = None, ()
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
        image = image.to(embeds.dtype)
        is_image = input_ids[0] == model.config.image_token_id
        visual = is_image.nonzero().squeeze(-1)
        if len(visual) != len(image):
            raise InputError(f"{len(visual)} image pad tokens but {len(image)} image features")
        embeds = embeds.masked_scatter(is_image[None, :, None], image)
        deepstack = tuple(layer.to(embeds.dtype) for layer in deepstack)
    cos, sin = inner.language_model.rotary_emb(embeds, positions.to(device))  # (1, P, D) each
    return PromptInputs(embeds, cos[0, :, None], sin[0, :, None], visual, deepstack, rope_delta)
