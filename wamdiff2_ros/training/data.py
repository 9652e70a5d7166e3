"""Training records in the reference JSON format, tokenised into (prompt, answer) examples; the task mix.

A record is ``{datasource, id, image: [path], conversations: [{from: human, value}, {from: gpt, value}]}``
(WAM-Diff2 README.md:103-125); NAVSIM exports and ``wamdiff2_ros.sim`` output both read here. The task of a
file is given by the config (the format does not carry it). Masking and batching live in ``collate.py``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import (
    COMMANDS,
    ROUTE_AHEAD_ARC_M,
    PromptTensors,
    build_prompt,
    chat_prompt_text,
    planning_user_text,
)
from wamdiff2_ros.model.tokenizer import EOS_ID


@dataclass(frozen=True)
class Record:
    """One human/gpt exchange about at most one image."""

    id: str
    task: str
    image_path: Path | None  # absolute; relative paths in the file are resolved against the file's folder
    user_text: str
    answer: str


@dataclass(frozen=True)
class Example:
    """A tokenised record: what the collator takes."""

    record: Record
    prompt: PromptTensors  # prefix ending with <|im_start|>assistant\n
    response_ids: torch.Tensor  # (R,) int64: answer tokens then <|im_end|>


def _record(item: object, task: str, folder: Path, where: str) -> Record:
    if not isinstance(item, dict) or not isinstance(item.get("conversations"), list):
        raise InputError(f"{where}: a record must be an object with a conversations list")
    turns = item["conversations"]
    human = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "human"), None)
    gpt = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "gpt"), None)
    if not isinstance(human, str) or not isinstance(gpt, str):
        raise InputError(f"{where}: needs one human and one gpt turn with string values")
    images = item.get("image") or []
    if isinstance(images, str):
        images = [images]
    if len(images) > 1:
        raise InputError(f"{where}: {len(images)} images; one front image per record is supported")
    image_path = (folder / images[0]).resolve() if images else None
    return Record(
        id=str(item.get("id", where)), task=task, image_path=image_path, user_text=human, answer=gpt
    )


def load_records(path: str | Path, task: str) -> list[Record]:
    """All records of one reference-format JSON file.

    Args:
        path: the JSON file (a list of records).
        task: the task its records train (planning, detection, qa).

    Returns:
        The records, in file order.

    Raises:
        InputError: unreadable file, not a list, or a malformed record (named by index).
    """
    path = Path(path)
    try:
        items = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read training records {path}: {error}") from error
    if not isinstance(items, list):
        raise InputError(f"{path} must hold a JSON list of records")
    return [_record(item, task, path.parent, f"{path}[{i}]") for i, item in enumerate(items)]


def load_image(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB pixels of an image file; ``InputError`` if it cannot be read."""
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except OSError as error:
        raise InputError(f"cannot read image {path}: {error}") from error


def tokenize_record(
    record: Record,
    tokenizer: PreTrainedTokenizerBase,
    *,
    min_pixels: int,
    max_pixels: int,
) -> Example:
    """Prompt tensors and answer tokens (plus <|im_end|>) of one record.

    Args:
        record: the record.
        tokenizer: the Qwen tokenizer.
        min_pixels: smallest resized image area.
        max_pixels: largest resized image area.

    Returns:
        The example.

    Raises:
        InputError: unreadable image, or image and ``<image>`` placeholder disagree.
    """
    image = load_image(record.image_path) if record.image_path is not None else None
    prompt = build_prompt(tokenizer, record.user_text, image, min_pixels=min_pixels, max_pixels=max_pixels)
    return Example(record=record, prompt=prompt, response_ids=answer_ids(tokenizer, record.answer))


def answer_ids(tokenizer: PreTrainedTokenizerBase, answer: str) -> torch.Tensor:
    """(R,) int64 tokens of an answer followed by <|im_end|> (the response the collator pads)."""
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [EOS_ID]
    return torch.tensor(ids, dtype=torch.int64)


class RecordDataset(torch.utils.data.Dataset):
    """Records of several tasks, tokenised on access (images are read each time; nothing is cached)."""

    def __init__(
        self,
        records: list[Record],
        tokenizer: PreTrainedTokenizerBase,
        *,
        min_pixels: int,
        max_pixels: int,
    ) -> None:
        self.records = records
        self.tokenizer = tokenizer
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Example:
        return tokenize_record(
            self.records[index], self.tokenizer, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )


def load_task_records(files: dict[str, str]) -> list[Record]:
    """Records of every task file, tasks in the order given."""
    return [record for task, path in files.items() for record in load_records(path, task)]


def vocabulary_texts(folders: list[Path]) -> list[str]:
    """What a reduced vocabulary (``model/vocab.py``) must cover for scenes like the folders': every user turn
    of their task files in the chat template, every answer, and a planning prompt per command (the node also
    sends "unknown", which generated scenes never do), with and without a branch distance (the node sends one
    to a ``branch_distance`` model, which may also see "unknown in 35m") or a route's shape."""
    route = np.stack([ROUTE_AHEAD_ARC_M, -np.asarray(ROUTE_AHEAD_ARC_M) / 4], axis=1)
    texts = [
        chat_prompt_text(planning_user_text(c, (1.0, 0.0), (0.0, 0.0), d, r), 1)
        for c in COMMANDS
        for d, r in ((None, None), (35.0, None), (None, route))
    ]
    for folder in folders:
        for task in ("planning", "detection", "qa"):
            path = Path(folder) / f"{task}.json"
            for record in load_records(path, task) if path.is_file() else []:
                texts += [chat_prompt_text(record.user_text, 1), record.answer]
    return texts


def epoch_order(records: list[Record], task_weights: dict[str, float], seed: int, epoch: int) -> list[int]:
    """Record indices of one epoch of the task mix, shuffled.

    Each task contributes ``round(weight * its record count)`` draws (weight 1.0 = every record once; below 1
    a seeded subset, above 1 repeats), so the mix is set per task and stays deterministic for a seed.

    Args:
        records: all records.
        task_weights: task -> weight; missing tasks weigh 1.0.
        seed: run seed.
        epoch: epoch number (each epoch has its own order).

    Returns:
        Indices into ``records``.

    Raises:
        InputError: the weights select no record at all.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order: list[int] = []
    tasks = dict.fromkeys(r.task for r in records)
    for task in tasks:
        indices = [i for i, r in enumerate(records) if r.task == task]
        draws = round(task_weights.get(task, 1.0) * len(indices))
        full, rest = divmod(draws, len(indices))
        order += indices * full + rng.sample(indices, rest)
    if not order:
        raise InputError("the task weights select no training record")
    rng.shuffle(order)
    return order
