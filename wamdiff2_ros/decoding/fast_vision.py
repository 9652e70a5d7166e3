"""Qwen3-VL's vision tower on the fast path: what depends on the image grid built once, one attention call per
block, optionally compiled and replayed from one CUDA graph per grid.

transformers' ``Qwen3VLVisionModel.forward`` rebuilds on every call what depends only on the grid (the
bilinear resampling of the learned position table, the 2D rotary angles, the sequence offsets) and splits
attention per image through host lists. A camera's grid never changes, so ``LeanVision`` builds those once per
grid (``GridInputs``) and runs the blocks as plain tensor functions over the model's own weights (read, never
copied: the tower's q/k/v is one matrix already). The patch embedding and the patch mergers are the model's
modules, called as they are. Uncompiled, on the CPU in fp32 with SDPA, the result is transformers' tower bit
for bit (test/decoding/test_fast_vision.py); compiled, the work between two attention calls is fused.

Training uses the same tower with ``trainable=True`` (``LeanVision.batch``): every image of a batch shares the
camera's grid, so a batch of 256 frames is one attention call per block instead of 256, and the learned
position table is resampled on every call (it trains). transformers' tower launches ~65 kernels per image
forward and backward (~3,400 more ops a micro-batch of 8 on the CPU profiler than batched).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from transformers import Qwen3VLForConditionalGeneration
from transformers.activations import ACT2FN
from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb_vision
from transformers.vision_utils import get_vision_interpolation_indices_and_weights, get_vision_position_ids

from wamdiff2_ros.decoding.cuda_graph import capture
from wamdiff2_ros.decoding.fast_model import compiled
from wamdiff2_ros.errors import InputError


@dataclass(frozen=True)
class VisionFeatures:
    """The tower's outputs for one image: merged features and the DeepStack features, (V, out hidden) each."""

    image: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class GridInputs:
    """What the tower needs of an image grid, besides its pixels: made once per grid."""

    indices: torch.Tensor  # (N, 4) rows of the learned position table each patch resamples
    weights: torch.Tensor  # (N, 4) their bilinear weights
    position: torch.Tensor | None  # (N, C) the resampled embeddings in the weights' dtype (None: trainable)
    cos: torch.Tensor  # (N, D) float32 2D rotary angles
    sin: torch.Tensor


@dataclass(frozen=True)
class VisionBlock:
    """One vision block's weights (the model's parameters, as they are), each a (weight, bias) pair."""

    norm1: tuple[torch.Tensor, torch.Tensor]  # LayerNorm
    qkv: tuple[torch.Tensor, torch.Tensor]  # (3C, C): q | k | v
    proj: tuple[torch.Tensor, torch.Tensor]
    norm2: tuple[torch.Tensor, torch.Tensor]
    fc1: tuple[torch.Tensor, torch.Tensor]
    fc2: tuple[torch.Tensor, torch.Tensor]

    @property
    def first_half(self) -> tuple[torch.Tensor, ...]:
        """Weights read before attention (``block_input``'s order)."""
        return (*self.norm1, *self.qkv)

    @property
    def second_half(self) -> tuple[torch.Tensor, ...]:
        """Weights read after attention (``block_output``'s order)."""
        return (*self.proj, *self.norm2, *self.fc1, *self.fc2)


def block_input(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    heads: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm, q/k/v, rotary: (N, C) -> q, k, v (N, heads, D), in transformers' order of operations."""
    h = F.layer_norm(x, (x.shape[-1],), norm_weight, norm_bias, eps)
    qkv = F.linear(h, qkv_weight, qkv_bias).reshape(x.shape[0], 3, heads, -1).permute(1, 0, 2, 3)
    q, k, v = qkv.unbind(0)
    q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
    return q, k, v


def block_output(
    x: torch.Tensor,
    attended: torch.Tensor,
    second: tuple[torch.Tensor, ...],
    act: Callable[[torch.Tensor], torch.Tensor],
    eps: float,
) -> torch.Tensor:
    """The rest of a block after attention: projection, residual, MLP, residual -> (N, C)."""
    proj_w, proj_b, norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b = second
    x = x + F.linear(attended.reshape(x.shape[0], -1), proj_w, proj_b)
    h = F.layer_norm(x, (x.shape[-1],), norm_w, norm_b, eps)
    return x + F.linear(act(F.linear(h, fc1_w, fc1_b)), fc2_w, fc2_b)


def between(
    x: torch.Tensor,
    attended: torch.Tensor,
    second: tuple[torch.Tensor, ...],
    first: tuple[torch.Tensor, ...],
    act: Callable[[torch.Tensor], torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    heads: int,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """The end of one block and the start of the next (one compiled piece: the residual meets the norm)."""
    x = block_output(x, attended, second, act, eps)
    return (x, *block_input(x, *first, cos, sin, heads, eps))


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, images: int = 1
) -> torch.Tensor:
    """Full attention over each image's patches, ``images`` images of equal grids laid end to end
    ((images x N, heads, D) each), in one call, laid out as transformers' SDPA path lays it out.

    On the H200 SDPA picks cuDNN's Hopper flash kernel: 0.65 ms per 1080p block (16 heads of 64 over 7,920
    patches, 400 TFLOP/s), against FlashInfer's FA3 0.67, its FA2 0.82 and SDPA's own flash kernel 0.87 ms.
    """
    rows, heads, dim = q.shape
    q, k, v = (t.reshape(images, rows // images, heads, dim).transpose(1, 2) for t in (q, k, v))
    attended = F.scaled_dot_product_attention(q, k, v, scale=scale).transpose(1, 2).contiguous()
    return attended.reshape(rows, heads, dim)


def _patch_gemm(conv: torch.nn.Conv3d, pixels: torch.Tensor) -> torch.Tensor:
    # The weight is flattened at each call, so that a training step's gradient reaches the parameter.
    return F.linear(pixels, conv.weight.flatten(1), conv.bias)


class LeanVision:
    """The vision tower of a Qwen3-VL model for images of fixed grids.

    Args:
        model: the transformers model (its ``model.visual`` weights and modules are used as they are).
        compile: compile the work between attention calls (``fast_model.compiled``).
        cuda_graph: replay the whole tower from one CUDA graph per grid (CUDA only).
        trainable: the weights train (``batch``): the learned position table is resampled on every call
            instead of once per grid.

    Raises:
        InputError: a CUDA graph asked for off CUDA, or with trainable weights.
    """

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        compile: bool = False,
        cuda_graph: bool = False,
        trainable: bool = False,
    ) -> None:
        visual = model.model.visual
        if cuda_graph and visual.device.type != "cuda":
            raise InputError(f"CUDA graphs need a CUDA model, got device {visual.device}")
        if cuda_graph and trainable:
            raise InputError("a CUDA graph replays fixed weights: trainable towers run without one")
        self.trainable = trainable
        self.visual = visual
        config = visual.config
        self.heads = config.num_heads
        self.scale = (config.hidden_size // config.num_heads) ** -0.5
        self.eps = visual.blocks[0].norm1.eps
        self.act = ACT2FN[config.hidden_act]
        self.blocks = [
            VisionBlock(
                norm1=(b.norm1.weight, b.norm1.bias),
                qkv=(b.attn.qkv.weight, b.attn.qkv.bias),
                proj=(b.attn.proj.weight, b.attn.proj.bias),
                norm2=(b.norm2.weight, b.norm2.bias),
                fc1=(b.mlp.linear_fc1.weight, b.mlp.linear_fc1.bias),
                fc2=(b.mlp.linear_fc2.weight, b.mlp.linear_fc2.bias),
            )
            for b in visual.blocks
        ]
        self.deepstack_layers = {layer: i for i, layer in enumerate(config.deepstack_visual_indexes)}
        self.compile, self.cuda_graph = compile, cuda_graph
        wrap = compiled if compile else (lambda function: function)
        self._block_input, self._between, self._block_output = (
            wrap(block_input),
            wrap(between),
            wrap(block_output),
        )
        # The patch embedding is a Conv3d whose kernel is its stride: compiled, it runs as the GEMM it is
        # (cuDNN's bf16 convolution took 1.24 ms of a 1080p tower); eager, transformers' module, bit for bit.
        self._patch_embed = visual.patch_embed
        if compile:
            self._patch_embed = partial(_patch_gemm, visual.patch_embed.proj)
        self._grids: dict[tuple[int, int, int], GridInputs] = {}
        self._graphs: dict[tuple[int, int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, list]] = {}
        self._pool = torch.cuda.graph_pool_handle() if cuda_graph else None

    @property
    def captures(self) -> int:
        """CUDA graphs captured so far (one per grid)."""
        return len(self._graphs)

    def grid_inputs(self, grid: tuple[int, int, int]) -> GridInputs:
        """The position embeddings and rotary angles of ``grid`` (t, h, w in patches), made on first use."""
        if grid not in self._grids:
            visual = self.visual
            grid_thw = torch.tensor([grid], device=visual.device)
            indices, weights = get_vision_interpolation_indices_and_weights(
                grid_thw,
                num_grid_per_side=visual.num_grid_per_side,
                mode=visual.interpolation_mode,
                align_corners=visual.interpolation_align_corners,
                spatial_merge_size=visual.spatial_merge_size,
            )
            with torch.no_grad():
                position = self._resampled(indices, weights)
            position_ids = get_vision_position_ids(grid_thw, visual.spatial_merge_size)
            cos, sin = visual.rotary_pos_emb(position, position_ids)
            self._grids[grid] = GridInputs(indices, weights, None if self.trainable else position, cos, sin)
        return self._grids[grid]

    def _resampled(self, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The learned position table resampled to a grid, (N, C) in the weights' dtype."""
        return (self.visual.pos_embed(indices) * weights[:, :, None]).sum(1).to(self.visual.dtype)

    @torch.no_grad()
    def __call__(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> VisionFeatures:
        """Features of one image: ``pixel_values`` (N, channels x patch volume), ``grid_thw`` (1, 3).

        Raises:
            InputError: not exactly one image.
        """
        if grid_thw.shape[0] != 1:
            raise InputError(f"the vision tower takes one image per prompt, got {grid_thw.shape[0]}")
        grid = tuple(int(n) for n in grid_thw[0].tolist())
        pixels = pixel_values.to(self.visual.device, self.visual.dtype)
        if not self.cuda_graph:
            return self.run(pixels, grid)
        if grid not in self._graphs:
            self.grid_inputs(grid)  # outside the capture: it allocates and syncs
            static = pixels.clone()
            out: list[VisionFeatures] = []

            def body() -> None:
                out[:] = [self.run(static, grid)]

            self._graphs[grid] = (capture(body, self._pool), static, out)
        graph, static, out = self._graphs[grid]
        static.copy_(pixels)
        graph.replay()
        features = out[-1]  # the next replay overwrites these buffers: hand out copies
        return VisionFeatures(features.image.clone(), tuple(f.clone() for f in features.deepstack))

    def batch(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> VisionFeatures:
        """Features of a batch of images of one grid (with gradients when the weights train):
        ``pixel_values`` (images x N, channels x patch volume), ``grid_thw`` (images, 3), equal rows.

        Returns:
            the images' merged and DeepStack features laid end to end, as transformers' tower lays them.

        Raises:
            InputError: the images' grids differ.
        """
        if not bool((grid_thw == grid_thw[:1]).all()):
            raise InputError("a batched vision tower takes images of one grid")
        grid = tuple(int(n) for n in grid_thw[0].tolist())
        return self.run(pixel_values.to(self.visual.device, self.visual.dtype), grid, images=len(grid_thw))

    def run(self, pixels: torch.Tensor, grid: tuple[int, int, int], images: int = 1) -> VisionFeatures:
        """The tower's forward over ``images`` images of ``grid`` laid end to end (what a CUDA graph
        captures, for one image)."""
        inputs = self.grid_inputs(grid)
        position = inputs.position
        if position is None:
            position = self._resampled(inputs.indices, inputs.weights)
        cos, sin = inputs.cos, inputs.sin
        if images > 1:
            position, cos, sin = (t.repeat(images, 1) for t in (position, cos, sin))
        x = self._patch_embed(pixels) + position
        blocks, last = self.blocks, len(self.blocks) - 1
        deepstack = [None] * len(self.deepstack_layers)
        q, k, v = self._block_input(x, *blocks[0].first_half, cos, sin, self.heads, self.eps)
        for index, block in enumerate(blocks):
            attended = attention(q, k, v, self.scale, images)
            if index < last:
                following = blocks[index + 1].first_half
                x, q, k, v = self._between(
                    x,
                    attended,
                    block.second_half,
                    following,
                    self.act,
                    cos,
                    sin,
                    self.heads,
                    self.eps,
                )
            else:
                x = self._block_output(x, attended, block.second_half, self.act, self.eps)
            if index in self.deepstack_layers:
                merger = self.deepstack_layers[index]
                deepstack[merger] = self.visual.deepstack_merger_list[merger](x)
        return VisionFeatures(self.visual.merger(x), tuple(deepstack))
