"""The fast path's owners: ``FastDecoder`` (one config over one static cache) and ``FastEngine`` (all of a
model's fast decoders, built once and kept: what the ``Planner`` holds across frames).

A ``FastDecoder`` runs the device loop (device_loop.py: grammar, sampling and commit on the device, whole
steps replayed from CUDA graphs) when CUDA graphs are on, else the host block loop (block.py) over the static
cache. Either way the answers are the eager decoder's (test/decoding/test_fast_*.py, test_device_loop.py).
"""

from __future__ import annotations

from dataclasses import replace

from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.block import decode_block, run_blocks
from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.device_loop import DeviceSteps
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import PromptTensors

# Prompt slots a new cache keeps beyond the prompt that made it: a camera's prompts differ by a few tokens
# frame to frame (the ego-state numbers), and must all fit the one cache (and graphs) built for the first.
PROMPT_HEADROOM = 64


class FastDecoder:
    """Decodes prompts of up to ``max_prompt_len`` tokens with one config over one static cache.

    Args:
        model: the model (eval mode), on the device to decode on.
        config: decode settings with a fast ``backend`` (``sdpa``, ``flashinfer`` or ``triton``).
        max_prompt_len: longest prompt to accept (the cache is sized for it once).
        decoder: a lean decoder to share between several ``FastDecoder`` (its fused weights are copies),
            compiled or not as ``config.compile`` says.
        device_loop: run the device loop even without CUDA graphs (its twin tests on the CPU); None: when
            ``config.cuda_graphs``.
        vision: a lean vision tower to share; None: one built for ``config`` (``lean_vision``).

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
        device_loop: bool | None = None,
        vision: LeanVision | None = None,
    ) -> None:
        if config.backend == "eager":
            raise InputError("FastDecoder needs backend sdpa, flashinfer or triton")
        if config.cuda_graphs and model.device.type != "cuda":
            raise InputError(f"CUDA graphs need a CUDA model, got device {model.device}")
        if decoder is not None and lean_key(decoder) != lean_key(config):
            raise InputError(
                f"the shared lean decoder has (compile, weights) {lean_key(decoder)}, the config "
                f"{lean_key(config)}"
            )
        self.model = model
        self.config = config
        self.max_prompt_len = max_prompt_len
        self.device_loop = config.cuda_graphs if device_loop is None else device_loop
        self.cache = StaticBlockCache(
            model,
            config.block_size,
            config.candidates,
            max_prompt_len,
            config.max_new_tokens,
            backend=config.backend,
            # The device loop captures whole steps; the host loop replays a graph per forward.
            cuda_graphs=config.cuda_graphs and not self.device_loop,
            decoder=decoder or lean_decoder(model, config),
            vision=vision or lean_vision(model, config),
            prompt_graphs=config.cuda_graphs,
            prompt_backend=None if config.prompt_attention == "auto" else config.prompt_attention,
        )
        self._steps: dict[int, tuple[TokenGrammar | None, DeviceSteps]] = {}  # by id of the grammar

    @property
    def captures(self) -> int:
        """CUDA graphs captured by this decoder so far (whole steps, or forwards under the host loop, and the
        text prefill's per prompt length); the vision tower's are its own (``LeanVision.captures``), shared
        between decoders."""
        cache = self.cache
        forwards = len(cache.graphs.graphs) if cache.graphs is not None else 0
        prompts = len(cache.prompt_graphs.graphs) if cache.prompt_graphs is not None else 0
        return forwards + prompts + sum(steps.captures for _, steps in self._steps.values())

    def decode(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt: PromptTensors,
        grammar: TokenGrammar | None = None,
        seed: int | None = None,
    ) -> DecodeResult:
        """Decode one prompt (see ``engine.decode`` for the arguments and result).

        Args:
            seed: seed of candidate 0 for this decode; None: the config's.

        Raises:
            InputError: the prompt is longer than ``max_prompt_len``.
        """
        self.cache.forwards = 0
        config = self.config if seed is None else replace(self.config, seed=seed)
        grammar = grammar if config.grammar else None
        if not self.device_loop:
            result = decode_block(self.model, tokenizer, prompt, config, grammar, cache=self.cache)
        else:
            result = run_blocks(self.cache, tokenizer, prompt, config, self.steps_for(grammar))
        return replace(result, vision_s=self.cache.vision_s)

    def steps_for(self, grammar: TokenGrammar | None) -> DeviceSteps:
        """The device loop's buffers and graphs for answers of ``grammar`` (None: unconstrained)."""
        if id(grammar) not in self._steps:  # the grammar is kept with its steps: its id stays unique
            self._steps[id(grammar)] = (
                grammar,
                DeviceSteps(self.cache, self.config, grammar, self.config.cuda_graphs),
            )
        return self._steps[id(grammar)][1]


def lean_key(config: DecodeConfig | LeanDecoder) -> tuple[bool, str]:
    """What a lean text decoder depends on in a decode config (or is built with): compile, weights."""
    return config.compile, config.weights


def lean_decoder(model: Qwen3VLForConditionalGeneration, config: DecodeConfig) -> LeanDecoder:
    """The lean text decoder a fast decoder of ``config`` runs."""
    return LeanDecoder(model, compile=config.compile, weights=config.weights)


def vision_key(config: DecodeConfig) -> tuple[bool, bool]:
    """What a vision tower depends on in a decode config: compile, CUDA graph."""
    return config.compile, config.cuda_graphs


def lean_vision(model: Qwen3VLForConditionalGeneration, config: DecodeConfig) -> LeanVision:
    """The vision tower a fast decoder of ``config`` runs: compiled and graphed as the decoder is."""
    compile, cuda_graphs = vision_key(config)
    return LeanVision(model, compile=compile, cuda_graph=cuda_graphs)


class FastEngine:
    """Every fast decoder one model needs, each built on first use and then kept: one lean decoder (fused
    weights, compiled code) per compile and weight-format setting, a lean vision tower per compile/graph
    setting (its grid inputs and graph per camera size), and per decode config (seed aside) the static caches,
    attention plans and CUDA graphs sized for the prompts seen (a new camera size gets its own).

    Args:
        model: the model (eval mode), on its device.
    """

    def __init__(self, model: Qwen3VLForConditionalGeneration) -> None:
        self.model = model
        self._lean: dict[tuple[bool, str], LeanDecoder] = {}
        self._vision: dict[tuple[bool, bool], LeanVision] = {}
        self._decoders: dict[DecodeConfig, list[FastDecoder]] = {}
        self.builds = 0  # FastDecoders built (each allocates a cache); a warm engine builds none per frame

    def decoder(self, config: DecodeConfig, prompt_len: int) -> FastDecoder:
        """The smallest kept decoder for ``config`` that fits ``prompt_len`` tokens; built when none does."""
        key = replace(config, seed=0)  # the seed is a buffer value, not a shape
        fitting = [d for d in self._decoders.get(key, []) if d.max_prompt_len >= prompt_len]
        if fitting:
            return min(fitting, key=lambda d: d.max_prompt_len)
        if lean_key(config) not in self._lean:
            self._lean[lean_key(config)] = lean_decoder(self.model, config)
        if vision_key(config) not in self._vision:
            self._vision[vision_key(config)] = lean_vision(self.model, config)
        decoder = FastDecoder(
            self.model,
            key,
            prompt_len + PROMPT_HEADROOM,
            self._lean[lean_key(config)],
            vision=self._vision[vision_key(config)],
        )
        self._decoders.setdefault(key, []).append(decoder)
        self.builds += 1
        return decoder

    @property
    def captures(self) -> int:
        """CUDA graphs captured by all decoders and vision towers so far."""
        towers = sum(vision.captures for vision in self._vision.values())
        return towers + sum(d.captures for decoders in self._decoders.values() for d in decoders)

    def decode(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt: PromptTensors,
        config: DecodeConfig,
        grammar: TokenGrammar | None = None,
    ) -> DecodeResult:
        """``engine.decode`` over the kept decoders (the grammar already checked against the config)."""
        return self.decoder(config, prompt.length).decode(tokenizer, prompt, grammar, seed=config.seed)
