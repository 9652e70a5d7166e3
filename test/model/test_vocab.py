"""A reduced vocabulary: the model keeps a few hundred embedding rows and still speaks full Qwen ids."""

from __future__ import annotations

import json

import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.errors import CheckpointError
from wamdiff2_ros.model.checkpoint import load_checkpoint, save_checkpoint
from wamdiff2_ros.model.forward import block_causal_hidden, head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID
from wamdiff2_ros.model.vocab import (
    FULL_VOCAB,
    KEPT_FILE,
    UNKNOWN_ID,
    kept_embedding,
    reduce_vocabulary,
)

ANSWER = "2.31,0.02,4.70,0.05,7.12,0.11,9.55,0.20,12.01,0.31,14.50,0.45,17.02,0.61,19.55,0.80"


@pytest.fixture(scope="module")
def kept(kept_ids):
    return kept_ids


@pytest.fixture(scope="module")
def reduced(tiny_model, kept):
    return reduce_vocabulary(tiny_model, kept)


def test_kept_ids_cover_the_prompt_and_numbers_in_a_few_hundred_rows(kept, tokenizer, planning_prompt):
    assert len(kept) < 400 and kept == sorted(set(kept))
    assert {UNKNOWN_ID, MASK_ID} <= set(kept)
    assert set(planning_prompt.input_ids[0].tolist()) <= set(kept)
    assert set(tokenizer(ANSWER, add_special_tokens=False)["input_ids"]) <= set(kept)


def test_reduced_model_scores_kept_ids_exactly_like_the_full_model(
    tiny_model, reduced, kept, tokenizer, planning_prompt
):
    response = torch.tensor([tokenizer(ANSWER, add_special_tokens=False)["input_ids"][:16]])
    response[0, 8:] = MASK_ID
    full = head_logits(tiny_model, block_causal_hidden(tiny_model, planning_prompt, response, 8))
    small = head_logits(reduced, block_causal_hidden(reduced, planning_prompt, response, 8))
    assert small.shape[-1] == FULL_VOCAB
    ids = torch.tensor(kept)
    torch.testing.assert_close(small[..., ids], full[..., ids], rtol=0, atol=1e-5)
    others = torch.ones(FULL_VOCAB, dtype=torch.bool).index_fill_(0, ids, False)
    assert torch.isneginf(small[..., others]).all()
    columns = torch.tensor([kept[5], 2000, kept[-3]])  # 2000 is not kept
    assert 2000 not in kept
    subset = head_logits(reduced, block_causal_hidden(reduced, planning_prompt, response, 8), columns)
    torch.testing.assert_close(subset[..., [0, 2]], small[..., columns[[0, 2]]], rtol=0, atol=1e-5)
    assert torch.isneginf(subset[..., 1]).all()


def test_fast_path_gives_the_eager_tokens_on_a_reduced_model(reduced, tokenizer, planning_prompt):
    settings = {
        "block_size": 8,
        "steps": 4,
        "max_new_tokens": 96,
        "candidates": 2,
        "temperature": 1.0,
        "seed": 3,
    }
    eager = decode(reduced, tokenizer, planning_prompt, DecodeConfig(**settings))
    fast = decode(reduced, tokenizer, planning_prompt, DecodeConfig(backend="sdpa", **settings))
    assert [c.token_ids for c in fast.candidates] == [c.token_ids for c in eager.candidates]
    assert all(set(c.token_ids) <= set(kept_embedding(reduced).kept.tolist()) for c in eager.candidates)
    assert LeanDecoder(reduced, weights="fp8").head is None  # a few hundred rows: the head stays bf16


def test_reduced_checkpoint_round_trips_and_refuses_a_wrong_id_list(reduced, kept, planning_prompt, tmp_path):
    save_checkpoint(reduced, tmp_path / "small")
    assert json.loads((tmp_path / "small" / KEPT_FILE).read_text()) == kept
    loaded = load_checkpoint(tmp_path / "small").model
    response = torch.full((1, 8), MASK_ID)
    want = head_logits(reduced, block_causal_hidden(reduced, planning_prompt, response, 8))
    got = head_logits(loaded, block_causal_hidden(loaded, planning_prompt, response, 8))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    (tmp_path / "small" / KEPT_FILE).write_text(json.dumps(kept[:-1]))
    with pytest.raises(CheckpointError, match="ascending unique ids"):
        load_checkpoint(tmp_path / "small")
