"""How far FP8 weights (``decoder.weights: fp8``) move the fast path from the model's own weights.

Three measures over a fixed prompt set, each FP8 against the same fast path with the model's weights:
the hidden state after every layer of the prompt's prefill (the error as it accumulates through depth), the
first answer block's logits (through the FP8 LM head where the decoder has one: a full vocabulary's;
relative error and how often the top token agrees), and whole greedy answers
(planning grammar on, the node's B32 S8 dynamic rule): answers identical and tokens equal position by
position. ``wamdiff2 bench fp8`` prints them; docs/BENCHMARKS.md records them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding import fp8_fused
from wamdiff2_ros.decoding.config import PLAN_STEPS, DecodeConfig
from wamdiff2_ros.decoding.engine import decode, planning_grammar
from wamdiff2_ros.decoding.fast import FastEngine
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.fp8 import answer_logits
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import MASK_ID
from wamdiff2_ros.model.vocab import available_ids

# The node's decode, greedy: what the planner publishes as candidate 0.
PLAN_CONFIG = DecodeConfig(block_size=32, steps=PLAN_STEPS, threshold=0.9, max_new_tokens=128, grammar=True)


@dataclass(frozen=True)
class Fp8Accuracy:
    layer_errors: list[float]  # prompt 0's prefill: relative error of the hidden state after each layer
    logits_error: float  # first answer block, all prompts: ||fp8 - ref|| / ||ref|| over the scored columns
    top1_agreement: float  # first answer block: positions whose argmax agrees
    answers_identical: int  # greedy answers equal token for token
    answers: int
    token_agreement: float  # answer tokens equal position by position (over the longer answer)

    def as_dict(self) -> dict:
        return {**self.__dict__, "layer_errors": [round(e, 5) for e in self.layer_errors]}


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


def _layer_outputs(model, prompt: PromptTensors, decoder: LeanDecoder, backend: str) -> list[torch.Tensor]:
    """The hidden state after each layer but the last of ``prompt``'s prefill (the last feeds no K/V), the
    fused FP8 layers' pending down product added."""
    outputs: list[torch.Tensor] = []
    layer_output = decoder._prompt_output

    def recording(*args):
        x, pending = layer_output(*args)
        outputs.append(x.clone() if pending is None else fp8_fused.settle(x, pending))
        return x, pending

    decoder._prompt_output = recording
    try:
        StaticBlockCache(model, 32, 1, prompt.length, 32, backend=backend, decoder=decoder).prefill(prompt)
    finally:
        decoder._prompt_output = layer_output
    return outputs


def _first_block_logits(model, prompt: PromptTensors, decoder: LeanDecoder, backend: str) -> torch.Tensor:
    cache = StaticBlockCache(model, 32, 1, prompt.length, 32, backend=backend, decoder=decoder)
    cache.prefill(prompt)
    block = torch.full((1, 32), MASK_ID, device=model.device)
    hidden = cache.write_and_denoise(block[:, :0], block)
    return answer_logits(model, hidden, None, decoder.head)[0]  # (32, V): FP8's LM head included


def measure(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[PromptTensors],
    backend: str,
    compile: bool = False,
) -> Fp8Accuracy:
    """FP8 against the model's own weights on ``prompts``, on the fast path with ``backend``."""
    decoders = {w: LeanDecoder(model, compile=compile, weights=w) for w in ("bf16", "fp8")}
    reference, quantised = (_layer_outputs(model, prompts[0], decoders[w], backend) for w in ("bf16", "fp8"))
    layer_errors = [_relative(q, r) for q, r in zip(quantised, reference, strict=True)]
    logits = {
        w: torch.cat([_first_block_logits(model, p, d, backend) for p in prompts])
        for w, d in decoders.items()
    }
    scored = logits["bf16"].isfinite()  # a reduced vocabulary leaves the other columns at -inf in both
    logits = {w: torch.where(scored, value, 0.0) for w, value in logits.items()}
    top1 = (logits["fp8"].argmax(-1) == logits["bf16"].argmax(-1)).float().mean().item()
    config = replace(PLAN_CONFIG, backend=backend, compile=compile)
    grammar = planning_grammar(tokenizer, config, available_ids(model))
    engine = FastEngine(model)
    identical, equal, total = 0, 0, 0
    for prompt in prompts:
        ref, fp8 = (
            decode(model, tokenizer, prompt, replace(config, weights=w), grammar, engine).token_ids
            for w in ("bf16", "fp8")
        )
        identical += ref == fp8
        equal += sum(a == b for a, b in zip(ref, fp8, strict=False))
        total += max(len(ref), len(fp8))
    return Fp8Accuracy(
        layer_errors=layer_errors,
        logits_error=_relative(logits["fp8"], logits["bf16"]),
        top1_agreement=top1,
        answers_identical=identical,
        answers=len(prompts),
        token_agreement=equal / total,
    )
