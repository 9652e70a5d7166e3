"""A checkpoint's answers over the records of a ``wamdiff2 sim generate`` folder, for ``wamdiff2 eval``.

``predict_records`` is the one decode loop of offline evaluation (``training/evaluate.py`` scores its
output after a training phase; ``wamdiff2 eval predict`` writes it for ``eval open-loop``): planning and
detection answers under their grammar (detection's labels: the categories its prompt lists; a prompt that
lists none is decoded unconstrained), QA unconstrained, with forwards, answer tokens and seconds per answer.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import AnswerGrammars, decode
from wamdiff2_ros.decoding.fast import FastEngine
from wamdiff2_ros.decoding.result import grounding_scores
from wamdiff2_ros.errors import InputError, ParseError
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.vocab import available_ids
from wamdiff2_ros.training.data import Record, tokenize_record

# Keys beside the reference format's in a predicted detection record: the answer's item scores, and the
# sampled answers (text and item scores) decoded with it (``eval predict --candidates``).
ITEM_SCORES = "answer_item_scores"
SAMPLED_ANSWERS = "sampled_answers"
# Planning takes the decoders' default budget (128): a padded plan of a fast car ("101.72" at 4 s) is
# longer than the 96 tokens of one below 100 m, and a tighter budget makes the grammar cut it to "10.17".
MAX_NEW_TOKENS = {"planning": DecodeConfig().max_new_tokens, "detection": 160, "qa": 16}


@dataclass(frozen=True)
class Prediction:
    """One record's decoded answer and what it cost."""

    record: Record
    text: str
    forwards: int
    answer_tokens: int  # tokens of the answer, its <|im_end|> included
    seconds: float
    item_scores: list[float] | None = None  # detection: ``decoding.result.grounding_scores``
    # detection with config.candidates > 1: the sampled answers (text, item scores) after the greedy one
    sampled: tuple[tuple[str, list[float] | None], ...] = ()


@torch.inference_mode()
def predict_records(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    records: list[Record],
    config: DecodeConfig,
    *,
    min_pixels: int,
    max_pixels: int,
) -> list[Prediction]:
    """Decode every record with ``config``; its ``grammar`` flag turns the planning and detection grammars
    on (built once per prompt kind over the ids the model can emit). Detection decodes ``config.candidates``
    answers (the first greedy, the others sampled at ``config.temperature``: what ``eval open-loop`` fuses,
    as the planner node does); every other task one greedy answer.

    Args:
        model: the model (put in eval mode here).
        tokenizer: the Qwen tokenizer.
        records: records of any tasks.
        config: decode settings (the number style is the model's, ``min_int_digits_of``).
        min_pixels: smallest resized image area.
        max_pixels: largest resized image area.

    Returns:
        One prediction per record, in order.
    """
    model.eval()
    grammars = AnswerGrammars(tokenizer, replace(config, grammar=True), available_ids(model))
    fast = FastEngine(model) if config.backend != "eager" else None  # built once, kept for every record
    one = replace(config, candidates=1, temperature=0.0)
    predictions = []
    for record in records:
        example = tokenize_record(record, tokenizer, min_pixels=min_pixels, max_pixels=max_pixels)
        grammar = grammars.for_task(record.task, record.user_text) if config.grammar else None
        detection = record.task == "detection"
        settings = replace(config if detection else one, grammar=grammar is not None, greedy_first=True)
        started = time.perf_counter()
        result = decode(model, tokenizer, example.prompt, settings, grammar, fast)
        seconds = time.perf_counter() - started
        tokens = len(result.token_ids) + int(result.candidates[0].stopped)
        answers = [(c.text, grounding_scores(tokenizer, c) if detection else None) for c in result.candidates]
        predictions.append(
            Prediction(
                record, result.text, result.forwards, tokens, seconds, answers[0][1], tuple(answers[1:])
            )
        )
    return predictions


def answers_file(task: str, data_dir: Path, predictions: list[Prediction]) -> object:
    """What ``eval open-loop`` reads: planning ``{id: answer}`` (for a folder whose answers are written
    along the route, ``{id: [[x, y], ...]}``: the ego waypoints the planner makes of each answer with the
    sample's route, ``model.plan_frame``); detection and QA the task file's records (of the predicted ids)
    with their last turn replaced by the answer, and for detection the answer's item scores beside it
    (``ITEM_SCORES``; absent where the answer's tokens could not be mapped to its text) and the sampled
    answers decoded with it (``SAMPLED_ANSWERS``)."""
    answers = {p.record.id: p for p in predictions}
    if task == "planning":
        return _planning_answers(Path(data_dir), {key: p.text for key, p in answers.items()})
    items = json.loads((Path(data_dir) / f"{task}.json").read_text())
    records = []
    for item in items:
        if item["id"] not in answers:
            continue
        prediction = answers[item["id"]]
        answer = {"from": "gpt", "value": prediction.text}
        record = item | {"conversations": [*item["conversations"][:-1], answer]}
        if prediction.item_scores is not None:
            record[ITEM_SCORES] = prediction.item_scores
        if prediction.sampled:
            record[SAMPLED_ANSWERS] = [{"text": t, ITEM_SCORES: s} for t, s in prediction.sampled]
        records.append(record)
    return records


def _planning_answers(data_dir: Path, texts: dict[str, str]) -> dict[str, str | list]:
    from wamdiff2_ros.eval.open_loop import load_truth
    from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME, plan_to_ego
    from wamdiff2_ros.sim.dataset import load_plan_frame

    frame = load_plan_frame(data_dir)
    if frame == DEFAULT_PLAN_FRAME:
        return texts
    truth, answers = load_truth(data_dir), {}
    for key, text in texts.items():
        try:
            values = parse_waypoints(text)
        except ParseError:  # kept as written: the scorer reports it as the ego path would
            answers[key] = text
            continue
        answers[key] = np.round(plan_to_ego(values, frame, truth[key].route_ego_m), 3).tolist()
    return answers


def cost_summary(predictions: list[Prediction]) -> dict:
    """Forwards per answer, answer tokens per forward and decode seconds (median, p90) over predictions."""
    forwards = sum(p.forwards for p in predictions)
    seconds = sorted(p.seconds for p in predictions)
    return {
        "samples": len(predictions),
        "forwards_per_answer": forwards / len(predictions),
        "tokens_per_forward": sum(p.answer_tokens for p in predictions) / forwards,
        "decode_s_median": statistics.median(seconds),
        "decode_s_p90": seconds[int(0.9 * (len(seconds) - 1))],
    }


def check_command_rules(checkpoint: Path, data: Path) -> None:
    """Raise InputError when the model at ``checkpoint`` reads another navigation command rule than the
    prompts of the data folder ``data`` were written in, or writes its plans in another frame than the
    folder's answers (its scores would measure the mismatch)."""
    from wamdiff2_ros.model.checkpoint import read_command_rule, read_plan_frame
    from wamdiff2_ros.sim.dataset import load_command_rule, load_plan_frame

    model_rule, data_rule = read_command_rule(checkpoint), load_command_rule(data)
    if model_rule != data_rule:
        raise InputError(
            f"{checkpoint} reads the {model_rule!r} command rule, {data} is written in {data_rule!r}"
        )
    model_frame, data_frame = read_plan_frame(checkpoint), load_plan_frame(data)
    if model_frame != data_frame:
        raise InputError(
            f"{checkpoint} plans in the {model_frame!r} frame, {data}'s answers in {data_frame!r}"
        )
