"""A reduced vocabulary: the model holds embedding rows for a chosen set of Qwen ids only.

With the full 151,936-row vocabulary the tied embedding is 92 % of a CPU-sized model and fixes its hidden size
(2 bytes x 151,936 x hidden must fit the 30 MB budget). A model trained on a known corpus uses a few thousand
of those ids; keeping only them frees the bytes and the LM-head work for wider layers. Everything outside
the model keeps the full Qwen id space (tokenizer, prompts, grammar, decoders, losses): the embedding maps
ids to rows on the way in, and ``model/forward.py head_logits`` scatters the rows' logits back to the full
vocabulary, every other id at -inf, on the way out. A checkpoint folder lists its ids in ``vocab_kept.json``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.errors import CheckpointError
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.presets import QWEN_VOCAB_SIZE
from wamdiff2_ros.model.tokenizer import MASK_ID

KEPT_FILE = "vocab_kept.json"
FULL_VOCAB = QWEN_VOCAB_SIZE  # the id space every caller uses
UNKNOWN_ID = 151643  # <|endoftext|>: the row an id outside the kept set reads (never in a trained prompt)


class KeptEmbedding(torch.nn.Module):
    """``embed_tokens`` over kept ids only: full-vocabulary ids in, rows of ``weight`` out."""

    def __init__(self, weight: torch.nn.Parameter, kept: torch.Tensor) -> None:
        """Args:
        weight: (len(kept), H) rows, in the order of ``kept`` (the model's tied head shares it).
        kept: (V_kept,) int64 ascending full-vocabulary ids, including ``UNKNOWN_ID`` and ``MASK_ID``.
        """
        super().__init__()
        self.weight = weight
        kept = kept.cpu()
        rows = torch.full((FULL_VOCAB,), int(torch.searchsorted(kept, UNKNOWN_ID)), dtype=torch.int64)
        rows[kept] = torch.arange(len(kept))
        is_kept = torch.zeros(FULL_VOCAB, dtype=torch.bool).index_fill_(0, kept, True)
        for name, value in (("kept", kept), ("rows", rows), ("is_kept", is_kept)):
            self.register_buffer(name, value.to(weight.device), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(self.rows[ids], self.weight)


def kept_embedding(model: Qwen3VLForConditionalGeneration) -> KeptEmbedding | None:
    """The model's ``KeptEmbedding``, or None for a full-vocabulary model."""
    embedding = model.model.language_model.embed_tokens
    return embedding if isinstance(embedding, KeptEmbedding) else None


def install(model: Qwen3VLForConditionalGeneration, kept: Iterable[int]) -> Qwen3VLForConditionalGeneration:
    """Make a model whose embedding has one row per kept id read full-vocabulary ids (in place).

    Raises:
        CheckpointError: the ids are not ascending and unique, miss ``UNKNOWN_ID`` or ``MASK_ID``, or their
            count differs from the embedding's rows.
    """
    ids = torch.tensor(list(kept), dtype=torch.int64)
    text = model.model.language_model
    rows = text.embed_tokens.weight.shape[0]
    if len(ids) != rows or not bool((ids[1:] > ids[:-1]).all()) or int(ids.max()) >= FULL_VOCAB:
        raise CheckpointError(f"need {rows} ascending unique ids below {FULL_VOCAB}, got {len(ids)}")
    if not bool(torch.isin(torch.tensor([UNKNOWN_ID, MASK_ID]), ids).all()):
        raise CheckpointError(f"the kept ids must include {UNKNOWN_ID} (unknown) and {MASK_ID} (mask)")
    text.embed_tokens = KeptEmbedding(text.embed_tokens.weight, ids)
    return model


def reduce_vocabulary(
    model: Qwen3VLForConditionalGeneration, kept: Iterable[int]
) -> Qwen3VLForConditionalGeneration:
    """A copy of a full-vocabulary model that keeps only the embedding rows of ``kept`` (ascending ids).

    Every other weight is copied as it is, so the copy's logits equal the original's at the kept ids.
    """
    kept = list(kept)
    config = copy.deepcopy(model.config)
    config.text_config.vocab_size = len(kept)
    small = build_model(config, seed=None, dtype=model.dtype, device=model.device, init_weights=False)
    state = model.state_dict()
    embed = state.pop("model.language_model.embed_tokens.weight")
    state.pop("lm_head.weight", None)
    state["model.language_model.embed_tokens.weight"] = embed[torch.tensor(kept, device=embed.device)]
    missing, unexpected = small.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the tied head is the embedding, re-tied below
        raise CheckpointError(f"cannot copy the weights: missing {missing}, unexpected {unexpected}")
    small.tie_weights()
    return install(small, kept)


def read_kept(folder: str | Path) -> list[int] | None:
    """The kept ids of a checkpoint folder (``vocab_kept.json``), or None for a full-vocabulary one.

    Raises:
        CheckpointError: the file exists but is not a JSON list of integers.
    """
    path = Path(folder) / KEPT_FILE
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise CheckpointError(f"{path}: needs a JSON list of token ids")
    return ids


def write_kept(model: Qwen3VLForConditionalGeneration, folder: str | Path) -> None:
    """Write ``vocab_kept.json`` when the model has a reduced vocabulary."""
    embedding = kept_embedding(model)
    if embedding is not None:
        (Path(folder) / KEPT_FILE).write_text(json.dumps(embedding.kept.tolist()) + "\n")


def ids_for(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str]) -> list[int]:
    """Ascending ids a reduced vocabulary needs for ``texts``.

    The ids of every text, every added or special token of the tokenizer (chat template, image and box
    markers), every printable ASCII character's token (digits, signs and letters: what numbers and unseen
    words fall back on), ``UNKNOWN_ID`` and ``MASK_ID``.
    """
    ids = {UNKNOWN_ID, MASK_ID, *tokenizer.added_tokens_decoder}
    for code in range(32, 127):
        ids.update(tokenizer(chr(code), add_special_tokens=False)["input_ids"])
    for text in texts:
        ids.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    return sorted(i for i in ids if i < FULL_VOCAB)


def available_ids(model: Qwen3VLForConditionalGeneration) -> list[int] | None:
    """The ids a model can emit: its kept ids (ascending) with a reduced vocabulary, None with the full one.

    A grammar built over them (``decoding.grammar``) counts only on tokens the model can write.
    """
    embedding = kept_embedding(model)
    return None if embedding is None else embedding.kept.tolist()
