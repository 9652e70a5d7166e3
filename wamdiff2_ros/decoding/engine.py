"""The one entry point: decode a prompt with a ``DecodeConfig`` (block diffusion or the AR twin)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.ar import decode_ar
from wamdiff2_ros.decoding.block import decode_block
from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.fast import FastEngine
from wamdiff2_ros.decoding.grammar import DetectionGrammar, PlanningGrammar, TokenGrammar, labels_in_prompt
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds
from wamdiff2_ros.model.vocab import available_ids


def _fitting(grammar: TokenGrammar, config: DecodeConfig, answer: str) -> TokenGrammar:
    if grammar.min_tokens() > config.max_new_tokens:
        raise InputError(
            f"max_new_tokens {config.max_new_tokens} is below the {grammar.min_tokens()} tokens of the "
            f"shortest {answer} answer"
        )
    return grammar


def planning_grammar(
    tokenizer: PreTrainedTokenizerBase, config: DecodeConfig, vocab_ids: Iterable[int] | None = None
) -> PlanningGrammar:
    """The planning grammar for a config, checked to fit in ``max_new_tokens``.

    Args:
        tokenizer: the Qwen tokenizer.
        config: decode settings (bound, number style, budget).
        vocab_ids: the ids the model can emit (``model.vocab.available_ids``); None: the whole vocabulary.

    Raises:
        InputError: the shortest valid answer is longer than ``config.max_new_tokens``.
    """
    eos = SpecialIds().eos
    grammar = PlanningGrammar(tokenizer, eos, config.max_step_m, config.min_int_digits, vocab_ids=vocab_ids)
    return _fitting(grammar, config, "planning")


def detection_grammar(
    tokenizer: PreTrainedTokenizerBase,
    config: DecodeConfig,
    labels: Sequence[str],
    vocab_ids: Iterable[int] | None = None,
) -> DetectionGrammar:
    """The grounding-answer grammar for the prompt's labels, checked to fit in ``max_new_tokens``.

    Args:
        tokenizer: the Qwen tokenizer.
        config: decode settings (budget).
        labels: the categories the prompt asks for (``grammar.labels_in_prompt``).
        vocab_ids: the ids the model can emit (``model.vocab.available_ids``); a reduced-vocabulary model
            needs them, or the budget pass may count on tokens it can never emit. None: the whole vocabulary.

    Raises:
        InputError: no labels, or ``config.max_new_tokens`` below the shortest answer (``[]<|im_end|>``).
    """
    grammar = DetectionGrammar(tokenizer, SpecialIds().eos, labels, vocab_ids=vocab_ids)
    return _fitting(grammar, config, "detection")


class AnswerGrammars:
    """One model's answer grammars for a decode config, each built on first use and then kept (about 0.2 s a
    build on a CPU): the planning grammar, and a detection grammar per label set.

    Args:
        tokenizer: the Qwen tokenizer.
        config: decode settings (bound, number style, budget).
        vocab_ids: the ids the model can emit (``model.vocab.available_ids``); None: the whole vocabulary.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, config: DecodeConfig, vocab_ids: Iterable[int] | None = None
    ) -> None:
        self.tokenizer, self.config = tokenizer, config
        self.vocab_ids = None if vocab_ids is None else list(vocab_ids)
        self._planning: PlanningGrammar | None = None
        self._detection: dict[tuple[str, ...], DetectionGrammar] = {}

    def planning(self) -> PlanningGrammar:
        if self._planning is None:
            self._planning = planning_grammar(self.tokenizer, self.config, self.vocab_ids)
        return self._planning

    def detection(self, labels: Sequence[str]) -> DetectionGrammar:
        key = tuple(labels)
        if key not in self._detection:
            self._detection[key] = detection_grammar(self.tokenizer, self.config, key, self.vocab_ids)
        return self._detection[key]

    def for_task(self, task: str, user_text: str) -> TokenGrammar | None:
        """The grammar of a task's answer: planning's; for detection, the one of the labels its prompt lists
        (None when it lists none); None for any other task (QA)."""
        if task == "planning":
            return self.planning()
        if task == "detection":
            try:
                return self.detection(labels_in_prompt(user_text))
            except InputError:
                return None
        return None


def decode(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    grammar: TokenGrammar | None = None,
    fast: FastEngine | None = None,
) -> DecodeResult:
    """Decode ``config.candidates`` answers to one prompt.

    Args:
        model: the model (eval mode).
        tokenizer: the Qwen tokenizer.
        prompt: prompt tensors (``model/prompt.py``).
        config: decode settings.
        grammar: a prebuilt answer grammar to reuse across calls: planning (``planning_grammar``) or detection
            (``detection_grammar``). When ``config.grammar`` is set and none is given, the planning grammar is
            built here over the ids the model can emit; ignored when ``config.grammar`` is off.
        fast: the model's long-lived fast decoders (``fast.FastEngine``) for the fast backends; None: a new
            one for this call (setup, allocation and graph capture included in it).

    Returns:
        The answers and their costs.

    Raises:
        InputError: the grammar cannot fit in ``max_new_tokens``, or a planning grammar's bound or number
            style differs from ``config.max_step_m`` / ``config.min_int_digits``.
    """
    if not config.grammar:
        grammar = None
    elif grammar is None:
        grammar = planning_grammar(tokenizer, config, available_ids(model))
    elif isinstance(grammar, PlanningGrammar) and (grammar.max_step_m, grammar.min_int_digits) != (
        config.max_step_m,
        config.min_int_digits,
    ):
        raise InputError(
            f"grammar (bound {grammar.max_step_m} m, {grammar.min_int_digits} integer digits) differs from "
            f"the config's ({config.max_step_m} m, {config.min_int_digits})"
        )
    elif grammar.min_tokens() > config.max_new_tokens:
        raise InputError(
            f"max_new_tokens {config.max_new_tokens} is below the shortest answer of the grammar"
        )
    if config.backend != "eager":
        if fast is None:
            from wamdiff2_ros.decoding.fast import (
                FastEngine,
            )  # the fast path is opt-in and imported only then

            fast = FastEngine(model)
        return fast.decode(tokenizer, prompt, config, grammar)
    run = decode_ar if config.decoder == "ar" else decode_block
    return run(model, tokenizer, prompt, config, grammar)
