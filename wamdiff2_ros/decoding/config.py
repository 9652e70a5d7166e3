"""Decode settings (one dataclass, checked on construction) and the result types every decoder returns."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from wamdiff2_ros.errors import InputError

CACHE_ORDERS = ("fused", "reference")
DECODERS = ("block", "ar")
BACKENDS = ("eager", "sdpa", "flashinfer", "triton")
# Fast-path text-layer weights: bf16 (the checkpoint's dtype; fp32 on a CPU model), fp8 (W8A8) or
# fp8_weight_only (W8A16): decoding/fp8.py
WEIGHT_FORMATS = ("bf16", "fp8", "fp8_weight_only")
# The prompt's attention on the fast path: auto is decoding.attention.prompt_backend's choice for the backend.
PROMPT_ATTENTIONS = ("auto", "sdpa", "flashinfer", "flex")
# Steps per block the planner uses unless told otherwise (node, `wamdiff2 plan`, closed loop). DecodeConfig
# keeps the reference's 32; with the dynamic rule 8 caps a block at 8 forwards, and on the default model it
# plans as well as 32 in a third fewer forwards (models/default/MODEL_CARD.md).
PLAN_STEPS = 8


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode one prompt. Defaults are the reference's (gpu.py:55-76) unless noted.

    Attributes:
        decoder: ``block`` (block diffusion, any B) or ``ar`` (the uncached B = 1 twin, for checks).
        block_size: B, tokens denoised together (1 = autoregressive). Default 32.
        steps: denoising forwards allowed per block. Default 32. The static and sequential rules use
            ``min(steps, block_size)`` steps.
        commit_rule: ``low_confidence_dynamic`` (commit every masked token with confidence >= threshold,
            at least the best one), ``low_confidence_static`` (the top tokens on an even schedule so the
            block ends in exactly ``steps``), or ``sequential`` (the left-most masked tokens, same schedule).
        threshold: confidence threshold of the dynamic rule. Default 0.9.
        temperature: 0 = greedy argmax; > 0 = sampling from softmax(logits / T).
        seed: seed of candidate 0; candidate k uses ``seed + k``.
        greedy_first: candidate 0 takes the argmax whatever ``temperature`` says (the node's setting: one
            greedy plan and K - 1 sampled alternatives for the scorer).
        max_new_tokens: answer tokens at most (the reference's gpu.py default is 128). Blocks are
            decoded whole and the answer is cut here.
        candidates: K answers decoded together in one batch.
        cache_order: ``fused`` writes block i to the cache during the first denoising step of block i+1 (one
            forward fewer per block); ``reference`` runs the reference's extra clean forward per block.
        grammar: constrain tokens to an answer grammar so that the answer always parses: the planning answer
            ``x1,y1,...,x8,y8<|im_end|>`` (2 decimals, bounded) unless the caller passes another one to
            ``engine.decode`` (the detection answer's, ``engine.detection_grammar``: ``Planner.detect``).
        max_step_m: grammar bound: waypoint k (k = 1..8, 0.5 s apart) has |x|, |y| <= k * max_step_m.
            Default 20 m per 0.5 s step (144 km/h).
        min_int_digits: grammar's number style: 1 plain (``5.00``), 2 padded (``05.00``, what a model trained
            on padded answers writes; ``model/prompt.py``).
        suppress_mask_token: never emit the mask id (the reference does not suppress it; pitfall 7).
        Default on.
        backend: ``eager`` (transformers' forward over a ``DynamicCache``: the reference), ``sdpa`` or
            ``flashinfer`` (the fast path: static cache, lean forward, that attention; decoding/fast.py), or
            ``triton`` (the fast path with the split-keys kernels for the answer;
            decoding/attention/split_keys.py); ``prompt_attention`` says what serves the prompt.
        cuda_graphs: fast path only: replay CUDA graphs instead of launching kernels (CUDA devices only).
        compile: fast path only: run the lean forward's work between attention calls (and, with CUDA graphs,
            each whole step's LM head, sampling and commit) through ``torch.compile``; the uncompiled code is
            its twin. The first forward of each shape compiles (seconds to a minute on a GPU).
        weights: fast path only: ``bf16`` (the model's own weights), ``fp8`` (opt-in: the text layers'
            matrices in FP8 with row-wise scales, W8A8 through ``torch._scaled_mm`` in fused layers:
            decoding/fp8_fused.py, and a full vocabulary's LM head where a step scores every column) or
            ``fp8_weight_only`` (the same weights times bf16 activations, W8A16 through a Triton kernel;
            decoding/fp8.py). Not the default until a trained model shows the quality holds (fp8 is the
            faster on the H200) (docs/DECISIONS.md).
        prompt_attention: fast path only: the prompt's attention; ``auto`` (on CUDA for the ``flashinfer``
            and ``triton`` backends ``flex`` from 1,600 prompt tokens and ``sdpa`` below, else the backend's
            own, FlashInfer for ``triton``: ``attention.prompt_backend``),
            ``sdpa``, ``flashinfer`` or ``flex`` (one block-causal FlexAttention call per layer, on CUDA
            always through torch.compile, which is what makes it one kernel, whatever ``compile`` says;
            decoding/attention/flex.py).
    """

    decoder: str = "block"
    block_size: int = 32
    steps: int = 32
    commit_rule: str = "low_confidence_dynamic"
    threshold: float = 0.9
    temperature: float = 0.0
    seed: int = 0
    greedy_first: bool = False
    max_new_tokens: int = 128
    candidates: int = 1
    cache_order: str = "fused"
    grammar: bool = False
    max_step_m: float = 20.0
    min_int_digits: int = 1
    suppress_mask_token: bool = True
    backend: str = "eager"
    cuda_graphs: bool = False
    compile: bool = False
    weights: str = "bf16"
    prompt_attention: str = "auto"

    def __post_init__(self) -> None:
        from wamdiff2_ros.decoding import commit_rules  # the registry (and torch) only once a config is made

        choices = {
            "decoder": DECODERS,
            "commit_rule": commit_rules.names(),  # the registry's: a new rule is valid once registered
            "cache_order": CACHE_ORDERS,
            "backend": BACKENDS,
            "weights": WEIGHT_FORMATS,
            "prompt_attention": PROMPT_ATTENTIONS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise InputError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("block_size", "steps", "max_new_tokens", "candidates"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 < self.threshold <= 1.0:
            raise InputError(f"threshold must be in (0, 1], got {self.threshold}")
        if not self.temperature >= 0.0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if self.min_int_digits not in (1, 2):
            raise InputError(f"min_int_digits must be 1 or 2, got {self.min_int_digits}")
        if not self.max_step_m > 0.0:
            raise InputError(f"max_step_m must be > 0, got {self.max_step_m}")
        if self.decoder == "ar" and self.block_size != 1:
            raise InputError(
                f"the ar decoder decodes one token per block; block_size must be 1, got {self.block_size}"
            )

        if self.backend != "eager" and self.decoder != "block":
            raise InputError(f"backend {self.backend!r} serves the block decoder only, not {self.decoder!r}")
        for name in ("cuda_graphs", "compile"):
            if getattr(self, name) and self.backend == "eager":
                raise InputError(f"{name} needs a fast backend (sdpa, flashinfer or triton), not eager")
        if self.prompt_attention != "auto" and self.backend == "eager":
            raise InputError(f"prompt_attention {self.prompt_attention!r} needs a fast backend, not eager")
        if self.weights != "bf16" and self.backend == "eager":
            raise InputError(
                f"weights {self.weights!r} need a fast backend (sdpa, flashinfer or triton), not eager"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecodeConfig:
        """Build from a mapping; unknown keys are an ``InputError``, never silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"unknown decode settings {unknown}; known: {sorted(known)}")
        return cls(**values)


@dataclass(frozen=True)
class Candidate:
    """One decoded answer."""

    token_ids: tuple[int, ...]  # answer tokens, cut before the first <|im_end|> and at max_new_tokens
    text: str
    stopped: bool  # True when <|im_end|> was produced within max_new_tokens
    seed: int
    # Per token of token_ids: its probability under the constrained logits of the step that committed it
    # (the model's, after the grammar, at temperature 1); () where a decoder does not report them.
    token_probabilities: tuple[float, ...] = ()


@dataclass(frozen=True)
class DecodeResult:
    """Answers and costs of one decode call."""

    candidates: tuple[Candidate, ...]
    forwards: int  # model forward calls, prefill included; a batched call counts once
    steps_per_block: tuple[int, ...]  # denoising forwards of each decoded block
    prompt_tokens: int
    prefill_s: float  # vision tower and text prefill
    latency_s: float  # whole decode, prefill included
    vision_s: float = 0.0  # of prefill_s, the vision tower (measured by the fast path only)

    @property
    def text(self) -> str:
        """Text of the first candidate."""
        return self.candidates[0].text

    @property
    def token_ids(self) -> tuple[int, ...]:
        """Tokens of the first candidate."""
        return self.candidates[0].token_ids
