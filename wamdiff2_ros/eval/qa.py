"""Question answering by exact match after light normalisation (case, surrounding space, final period)."""

from __future__ import annotations

from collections.abc import Sequence

from wamdiff2_ros.errors import InputError


def normalise_answer(text: str) -> str:
    """Lower case, collapsed whitespace, no trailing period: ``" Yes. "`` -> ``"yes"``."""
    return " ".join(text.split()).lower().rstrip(".").strip()


def exact_match(predictions: Sequence[str], answers: Sequence[str]) -> float:
    """Fraction of predictions equal to their answer after ``normalise_answer``.

    Raises:
        InputError: different lengths or no answers.
    """
    if len(predictions) != len(answers) or not answers:
        raise InputError(
            f"need equally many predictions and answers, got {len(predictions)} and {len(answers)}"
        )
    hits = sum(normalise_answer(p) == normalise_answer(a) for p, a in zip(predictions, answers, strict=True))
    return hits / len(answers)
