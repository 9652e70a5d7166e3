"""Per-task evaluation of a checkpoint after a training phase: planning L2, detection mAP, QA exact match.

Decoding is ``eval.predict.predict_records`` with the reference defaults at the phase's block size (dynamic
rule, threshold 0.9, at most B steps per block) and the answer grammars, so that every planning answer
parses; forwards per answer are reported so the speed/quality trade-off of a block size is visible. Metrics
are ``eval``'s; this module only scores the answers. Planning errors are in the answers' own numbers: for
a model that writes its plans along the route (``model.plan_frame``), metres along and across the route, a
component figure; ``eval predict`` and the recipe's ``evaluate`` step score its ego waypoints.
"""

from __future__ import annotations

import numpy as np
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.errors import ParseError
from wamdiff2_ros.eval.detection import ImageDetections, detection_map
from wamdiff2_ros.eval.metrics import displacement_errors
from wamdiff2_ros.eval.predict import Prediction, cost_summary, predict_records
from wamdiff2_ros.eval.qa import exact_match
from wamdiff2_ros.model.box_fusion import fused_answers
from wamdiff2_ros.model.parse import parse_qa, parse_waypoints
from wamdiff2_ros.model.prompt import min_int_digits_of
from wamdiff2_ros.training.data import Record


def _detections(answers: list[tuple[str, list[float] | None]]) -> ImageDetections:
    """The well-formed boxes of answers with their scores, fused, on the answers' 0..1000 scale: as ``eval
    open-loop`` and the node take them."""
    fused, _ = fused_answers(answers, (1000, 1000))
    return ImageDetections(fused.boxes, fused.labels, fused.scores)


def _qa_text(text: str) -> str:
    try:
        return parse_qa(text)
    except ParseError:
        return ""  # an empty answer scores as a miss


def evaluate_records(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    records: list[Record],
    block_size: int,
    *,
    max_new_tokens: int,
    min_pixels: int,
    max_pixels: int,
) -> dict:
    """Decode every record and score it with its task's metric.

    Args:
        model: the model (put in eval mode here).
        tokenizer: the Qwen tokenizer.
        records: records of any tasks.
        block_size: B of the decode (1 = the AR teacher's cached B = 1 path).
        max_new_tokens: answer budget.
        min_pixels: smallest resized image area.
        max_pixels: largest resized image area.

    Returns:
        ``{task: metrics}``; every task has ``samples``, ``forwards_per_answer`` and ``tokens_per_forward``.
        Planning adds ADE/FDE/L2 per waypoint (metres) and ``parsed`` (fraction); detection adds mAP; QA adds
        exact match.
    """
    config = DecodeConfig(
        block_size=block_size,
        steps=block_size,
        max_new_tokens=max_new_tokens,
        threshold=0.9,
        grammar=True,
        min_int_digits=min_int_digits_of(model.config),
    )
    predictions = predict_records(
        model, tokenizer, records, config, min_pixels=min_pixels, max_pixels=max_pixels
    )
    by_task: dict[str, list[Prediction]] = {}
    for prediction in predictions:
        by_task.setdefault(prediction.record.task, []).append(prediction)
    return {task: _score(task, rows) for task, rows in by_task.items()}


def _score(task: str, rows: list[Prediction]) -> dict:
    summary = {
        key: cost_summary(rows)[key] for key in ("samples", "forwards_per_answer", "tokens_per_forward")
    }
    if task == "planning":
        pairs = []
        for row in rows:
            try:
                pairs.append((parse_waypoints(row.text), parse_waypoints(row.record.answer)))
            except ParseError:
                continue
        summary["parsed"] = len(pairs) / len(rows)
        if pairs:
            pred, truth = (np.stack(side) for side in zip(*pairs, strict=True))
            summary |= displacement_errors(pred, truth)
    elif task == "detection":
        truth = {r.record.id: _detections([(r.record.answer, None)]) for r in rows}
        predicted = {r.record.id: _detections([(r.text, r.item_scores), *r.sampled]) for r in rows}
        summary |= detection_map(truth, predicted)
    else:
        summary["exact_match"] = exact_match(
            [_qa_text(r.text) for r in rows], [r.record.answer for r in rows]
        )
    return summary
