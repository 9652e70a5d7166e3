"""The fast path's entry point: a decoder that keeps its static cache (and CUDA graphs) across prompts.

Chooses the loop: the fully graphed one (graphs.decode_graphed) when CUDA graphs are on and decoding is greedy
without grammar; otherwise the block decoder (block.py) over the static cache, whose forwards may still be
graph replays. Either way the answers are the eager decoder's (test/decoding/test_fast_*.py).
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.block import decode_block
from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


class FastDecoder:
    """Decodes prompts of up to ``max_prompt_len`` tokens with one config over one static cache.

    Args:
        model: the model (eval mode), on the device to decode on.
        config: decode settings with ``backend`` ``sdpa`` or ``flashinfer``.
        max_prompt_len: longest prompt to accept (the cache is sized for it once).
        decoder: a lean decoder to share between several ``FastDecoder`` (its fused weights are copies),
            compiled or not as ``config.compile`` says.

    Raises:
        InputError: the config asks for the eager backend, or ``decoder`` is compiled when the config is not
            (or the other way round).
    """

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        config: DecodeConfig,
        max_prompt_len: int,
        decoder: LeanDecoder | None = None,
    ) -> None:
        if config.backend == "eager":
            raise InputError("FastDecoder needs backend sdpa or flashinfer")
        if decoder is not None and decoder.compile != config.compile:
            raise InputError(
                f"the shared lean decoder has compile={decoder.compile}, the config {config.compile}"
            )
        self.model = model
        self.config = config
        self.cache = StaticBlockCache(
            model,
            config.block_size,
            config.candidates,
            max_prompt_len,
            config.max_new_tokens,
            backend=config.backend,
            cuda_graphs=config.cuda_graphs,
            decoder=decoder or LeanDecoder(model, compile=config.compile),
        )
        self.step_graphs = None

    @property
    def graphed_loop(self) -> bool:
        """Whether whole denoising steps are replayed (greedy, no grammar, CUDA graphs on)."""
        return self.config.cuda_graphs and self.config.temperature == 0.0 and not self.config.grammar

    def decode(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt: PromptTensors,
        grammar: TokenGrammar | None = None,
    ) -> DecodeResult:
        """Decode one prompt (see ``engine.decode`` for the arguments and result).

        Raises:
            InputError: the prompt is longer than ``max_prompt_len``.
        """
        self.cache.forwards = 0
        if self.graphed_loop:
            from wamdiff2_ros.decoding.graphs import StepGraphs, decode_graphed

            if self.step_graphs is None:
                self.step_graphs = StepGraphs(self.cache, self.config, SpecialIds())
            return decode_graphed(self.cache, tokenizer, prompt, self.config, self.step_graphs)
        return decode_block(self.model, tokenizer, prompt, self.config, grammar, cache=self.cache)
