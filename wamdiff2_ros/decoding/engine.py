"""The one entry point: decode a prompt with a ``DecodeConfig`` (block diffusion or the AR twin)."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.ar import decode_ar
from wamdiff2_ros.decoding.block import decode_block
from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.grammar import PlanningGrammar
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


def planning_grammar(tokenizer: PreTrainedTokenizerBase, config: DecodeConfig) -> PlanningGrammar:
    """The planning grammar for a config, checked to fit in ``max_new_tokens``.

    Raises:
        InputError: the shortest valid answer is longer than ``config.max_new_tokens``.
    """
    grammar = PlanningGrammar(tokenizer, SpecialIds().eos, config.max_step_m, config.min_int_digits)
    if grammar.min_tokens() > config.max_new_tokens:
        raise InputError(
            f"max_new_tokens {config.max_new_tokens} is below the {grammar.min_tokens()} tokens of the "
            "shortest planning answer"
        )
    return grammar


def decode(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    grammar: PlanningGrammar | None = None,
) -> DecodeResult:
    """Decode ``config.candidates`` answers to one prompt.

    Args:
        model: the model (eval mode).
        tokenizer: the Qwen tokenizer.
        prompt: prompt tensors (``model/prompt.py``).
        config: decode settings.
        grammar: a prebuilt planning grammar to reuse across calls (built here when ``config.grammar`` is set
            and none is given; ignored when ``config.grammar`` is off).

    Returns:
        The answers and their costs.

    Raises:
        InputError: the grammar cannot fit in ``max_new_tokens``, or the grammar's bound or number style
            differs from ``config.max_step_m`` / ``config.min_int_digits``.
    """
    if not config.grammar:
        grammar = None
    elif grammar is None:
        grammar = planning_grammar(tokenizer, config)
    elif (grammar.max_step_m, grammar.min_int_digits) != (config.max_step_m, config.min_int_digits):
        raise InputError(
            f"grammar (bound {grammar.max_step_m} m, {grammar.min_int_digits} integer digits) differs from "
            f"the config's ({config.max_step_m} m, {config.min_int_digits})"
        )
    elif grammar.min_tokens() > config.max_new_tokens:
        raise InputError(f"max_new_tokens {config.max_new_tokens} is below the shortest planning answer")
    if config.backend != "eager":
        from wamdiff2_ros.decoding.fast import FastDecoder  # the fast path is opt-in and imported only then

        return FastDecoder(model, config, prompt.length).decode(tokenizer, prompt, grammar)
    run = decode_ar if config.decoder == "ar" else decode_block
    return run(model, tokenizer, prompt, config, grammar)
