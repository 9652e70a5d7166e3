"""Answer text to waypoints, 2D detections or a QA answer; a ``ParseError`` says what is wrong.

Every parser first cuts at the first ``<|im_end|>`` (the reference leaves tokens after it in the last block;
pitfall 6 of docs/REFERENCE.md §5). Detection output follows Qwen3-VL's grounding format, a JSON list of
``{"bbox_2d": [x1, y1, x2, y2], "label": ...}``, which the reference does not document (its detection
serializer is unreleased).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from wamdiff2_ros.errors import InputError, ParseError
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

EOS_TEXT = "<|im_end|>"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_OBJECT = re.compile(r"\{[^{}]*\}")  # one grounding item (they hold lists, never objects)
_BOX_NUMBERS = re.compile(r'"bbox_2d"\s*:\s*\[([^\]]*)\]')
_BOX_NUMBER = re.compile(r"\d+(?:\.\d+)?")  # a number of a box, its sign left out
BOX_FRAMES = ("norm1000", "resized_px")


@dataclass(frozen=True)
class Detection:
    """One 2D box as the model wrote it, its label and the model's confidence in it."""

    label: str
    box: tuple[
        float, float, float, float
    ]  # x1, y1, x2, y2 in the frame the model uses (see boxes_to_source_px)
    score: float = 1.0  # grounding_item_scores' (1.0: not scored)


def answer_text(text: str) -> str:
    """The answer up to the first ``<|im_end|>``, stripped."""
    return text.split(EOS_TEXT, 1)[0].strip()


def parse_waypoints(text: str, *, max_abs_m: float | None = None) -> np.ndarray:
    """``x1,y1,...,x8,y8`` to an (8, 2) array of ego-frame metres (x forward, y left, 0.5 s apart).

    Args:
        text: decoded answer (may still hold ``<|im_end|>`` and what follows).
        max_abs_m: if given, every coordinate must satisfy |v| <= max_abs_m.

    Returns:
        (8, 2) float64 array, all finite.

    Raises:
        ParseError: empty answer, wrong count, a field that is not a decimal number, or a value out of bounds.
    """
    answer = answer_text(text)
    if not answer:
        raise ParseError("empty answer: expected 16 comma-separated numbers")
    fields = [field.strip() for field in answer.split(",")]
    if len(fields) != 2 * NUM_WAYPOINTS:
        raise ParseError(
            f"expected {2 * NUM_WAYPOINTS} comma-separated numbers, got {len(fields)} in {answer[:80]!r}"
        )
    for index, field in enumerate(fields):
        if not _NUMBER.fullmatch(field):
            raise ParseError(
                f"value {index + 1} of {2 * NUM_WAYPOINTS} is not a decimal number: {field[:20]!r}"
            )
    values = np.array([float(field) for field in fields], dtype=np.float64)
    if max_abs_m is not None and np.any(np.abs(values) > max_abs_m):
        worst = int(np.argmax(np.abs(values)))
        raise ParseError(f"value {worst + 1} = {values[worst]} exceeds the bound of {max_abs_m} m")
    return values.reshape(NUM_WAYPOINTS, 2)


def _json_answer(text: str) -> str:
    answer = answer_text(text)
    fenced = _FENCE.match(answer)
    return fenced.group(1) if fenced else answer


def _detection(item: object, index: int) -> Detection:
    """One grounding item; ParseError when it is not an object with a label and an ordered 4-number box."""
    if not isinstance(item, dict) or "bbox_2d" not in item:
        raise ParseError(f"detection {index} has no 'bbox_2d': {str(item)[:80]}")
    box = item["bbox_2d"]
    if not (
        isinstance(box, list)
        and len(box) == 4
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box)
        and all(np.isfinite(box))
    ):
        raise ParseError(f"detection {index}: 'bbox_2d' must be 4 finite numbers, got {box!r}")
    if box[0] > box[2] or box[1] > box[3]:
        raise ParseError(f"detection {index}: box {box} has x1 > x2 or y1 > y2")
    label = item.get("label")
    if not isinstance(label, str) or not label.strip():
        raise ParseError(f"detection {index} has no label")
    return Detection(label=label.strip(), box=tuple(float(v) for v in box))


def parse_detections(text: str) -> list[Detection]:
    """Qwen-style grounding JSON to detections (an empty list is a valid answer).

    Args:
        text: decoded answer; a surrounding ```json fence is allowed.

    Returns:
        The detections in answer order.

    Raises:
        ParseError: not JSON, not a list of objects, or an item without a label or four finite, ordered
            coordinates.
    """
    answer = _json_answer(text)
    try:
        items = json.loads(answer)
    except json.JSONDecodeError as error:
        raise ParseError(
            f"detections are not valid JSON ({error.msg} at char {error.pos}): {answer[:80]!r}"
        ) from error
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ParseError(f"detections must be a JSON list of objects, got {type(items).__name__}")
    return [_detection(item, index) for index, item in enumerate(items)]


def salvage_detections(
    text: str, item_scores: Sequence[float] | None = None
) -> tuple[list[Detection], list[str]]:
    """The well-formed items of a grounding answer, and what was wrong with the rest; never raises.

    A model answer is often right but for one box (corners swapped) or cut off by the token budget after
    some complete items; ``parse_detections`` rejects all of it. Here each ``{...}`` object of the answer
    (the format has no nested objects) is parsed and checked on its own.

    Args:
        text: the answer.
        item_scores: one score per ``{...}`` object of ``text`` (``grounding_item_scores``), given to the
            detection it makes; None, or a count that does not match the objects: every score 1.0.

    Returns:
        (detections, problems): the valid items in answer order, and one message per rejected item or
        unreadable remainder (empty when the answer parses as a whole).
    """
    items = list(_OBJECT.finditer(_json_answer(text)))
    if item_scores is None or len(item_scores) != len(items):
        item_scores = [1.0] * len(items)
    try:
        detections = parse_detections(text)
        if len(detections) == len(items):
            detections = [replace(d, score=item_scores[i]) for i, d in enumerate(detections)]
        return detections, []
    except ParseError as error:
        whole = str(error)
    detections, problems = [], []
    for index, match in enumerate(items):
        try:
            detection = _detection(json.loads(match.group(0)), index)
            detections.append(replace(detection, score=item_scores[index]))
        except json.JSONDecodeError as error:
            problems.append(f"detection {index} is not valid JSON ({error.msg})")
        except ParseError as error:
            problems.append(str(error))
    return detections, problems or [whole]


@dataclass(frozen=True)
class ItemTokens:
    """Which answer tokens wrote one grounding item: those that open it (from the end of the previous item,
    or the answer's start, through its brace: where the answer chose another box over closing the list) and,
    for each number of its box, those that hold its digits (leading digit first)."""

    opening: tuple[int, ...]
    numbers: tuple[tuple[int, ...], ...]


def grounding_item_tokens(text: str, pieces: Sequence[str]) -> list[ItemTokens] | None:
    """The tokens of each ``{...}`` object of ``_json_answer(text)``, in order (the items
    ``salvage_detections`` indexes); None when ``pieces`` (each token's text, ``model.tokenizer.token_texts``)
    do not spell ``text``."""
    if "".join(pieces) != text:
        return None
    owner = [i for i, piece in enumerate(pieces) for _ in piece]  # character -> its token
    answer = _json_answer(text)
    offset = text.find(answer)  # the answer's characters within the text (a fence or spaces cut)
    items, opened = [], offset
    for match in _OBJECT.finditer(answer):
        start, end = offset + match.start(), offset + match.end()
        opening = tuple(dict.fromkeys(owner[c] for c in range(opened, start + 1)))
        opened = end
        box = _BOX_NUMBERS.search(text, start, end)
        numbers = ()
        if box:
            numbers = tuple(
                tuple(dict.fromkeys(owner[box.start(1) + c] for c in range(m.start(), m.end())))
                for m in _BOX_NUMBER.finditer(box.group(1))
            )
        items.append(ItemTokens(opening, numbers))
    return items


def grounding_item_scores(
    text: str, pieces: Sequence[str], probabilities: Sequence[float]
) -> list[float] | None:
    """A confidence for each grounding item (``{...}``) of an answer, from its tokens' probabilities.

    An item's score is P(it is there) x P(where it is, coarsely): the lowest probability among the tokens
    that open it (``ItemTokens.opening``) times the mean probability of the tokens that hold the leading
    digit of each of its box's numbers. Chosen among fourteen such rules on a selection set of simulated
    frames (docs/DECISIONS.md, "detection scores"; ``tools/probes/detection_scores.py``); boxes ranked by
    it score a higher AP than boxes in answer order, and it is what Detection2D.score carries.

    Args:
        text: the answer as decoded (``Candidate.text``).
        pieces: each answer token's text (``model.tokenizer.token_texts``).
        probabilities: each answer token's probability (``Candidate.token_probabilities``).

    Returns:
        One score in [0, 1] per item (``grounding_item_tokens``' order); None when the pieces do not spell
        ``text`` or the counts differ.
    """
    items = grounding_item_tokens(text, pieces) if len(pieces) == len(probabilities) else None
    if items is None:
        return None
    scores = []
    for item in items:
        existence = min(probabilities[t] for t in item.opening)
        leading = {number[0] for number in item.numbers}
        place = sum(probabilities[t] for t in leading) / len(leading) if leading else 1.0
        scores.append(float(existence * place))
    return scores


def boxes_to_source_px(
    detections: list[Detection],
    source_wh_px: tuple[int, int],
    *,
    frame: str = "norm1000",
    resized_wh_px: tuple[int, int] | None = None,
) -> np.ndarray:
    """Boxes in pixels of the source image, clipped to it.

    Args:
        detections: parsed detections.
        source_wh_px: (width, height) of the camera image.
        frame: ``norm1000`` (Qwen3-VL: 0..1000 relative coordinates) or ``resized_px`` (Qwen2.5-VL:
            pixels of the resized model input).
        resized_wh_px: (width, height) of the model input, needed for ``resized_px``.

    Returns:
        (N, 4) float64 x1, y1, x2, y2.

    Raises:
        InputError: unknown frame, or ``resized_px`` without ``resized_wh_px``.
    """
    if frame not in BOX_FRAMES:
        raise InputError(f"box frame must be one of {BOX_FRAMES}, got {frame!r}")
    if frame == "resized_px" and resized_wh_px is None:
        raise InputError("the resized_px frame needs resized_wh_px")
    width, height = source_wh_px
    reference_w, reference_h = (1000.0, 1000.0) if frame == "norm1000" else resized_wh_px
    boxes = np.array([d.box for d in detections], dtype=np.float64).reshape(-1, 4)
    boxes[:, 0::2] = np.clip(boxes[:, 0::2] * width / reference_w, 0, width)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2] * height / reference_h, 0, height)
    return boxes


def parse_qa(text: str) -> str:
    """A free-text answer, cut at ``<|im_end|>`` and stripped; ``ParseError`` when nothing is left."""
    answer = answer_text(text)
    if not answer:
        raise ParseError("empty answer")
    return answer
