"""The training forward's batched vision tower is transformers' tower: the same logits bit for bit and the
same gradients to rounding in fp32 on the CPU (also with a text-only sample beside a framed one: the image
features placed by the collator's indices), and batches whose frames differ in size still go through
transformers' tower."""

from __future__ import annotations

import copy
import dataclasses

import torch

from wamdiff2_ros.training.collate import DiffusionCollator, model_rope_index
from wamdiff2_ros.training.data import tokenize_record
from wamdiff2_ros.training.forward import MaskedLogits


def _batch(model, examples):
    collator = DiffusionCollator(model_rope_index(model), 8, schedule="stratified")
    return collator(examples, torch.Generator().manual_seed(7))


def _transformers_logits(model, batch):
    """The training forward as it was before the batched tower: pixels into transformers' model."""
    out = model.model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        mm_token_type_ids=batch.mm_token_type_ids,
        pixel_values=batch.pixel_values,
        image_grid_thw=batch.image_grid_thw,
        use_cache=False,
    )
    return model.lm_head(out.last_hidden_state[batch.loss_mask]).float()


def _loss_and_grads(model, logits):
    loss = logits.square().mean()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def test_batched_vision_gives_transformers_logits_and_gradients(tiny_model, examples):
    model = copy.deepcopy(tiny_model).float().train()
    batch = _batch(model, examples)
    assert len(set(map(tuple, batch.image_grid_thw.tolist()))) == 1  # one camera grid: the batched path
    theirs = _transformers_logits(model, batch)
    their_grads = _loss_and_grads(model, theirs)
    mine = MaskedLogits(model)(batch)
    my_grads = _loss_and_grads(model, mine)
    assert torch.equal(mine, theirs)  # the same operations on the same rows
    assert my_grads.keys() == their_grads.keys()
    assert any(name.startswith("model.visual.") for name in my_grads)
    for name, grad in my_grads.items():
        # one attention backward over the batch sums in another order than one per image: ~1e-12 apart
        torch.testing.assert_close(grad, their_grads[name], rtol=1e-6, atol=1e-9, msg=name)


def test_frames_of_different_sizes_go_through_transformers_tower(tiny_model, examples, tokenizer):
    model = copy.deepcopy(tiny_model).float().eval()
    larger = tokenize_record(examples[1].record, tokenizer, min_pixels=6272, max_pixels=6272)
    batch = _batch(model, [examples[0], larger])
    assert len(set(map(tuple, batch.image_grid_thw.tolist()))) == 2
    with torch.no_grad():
        assert torch.equal(MaskedLogits(model)(batch), _transformers_logits(model, batch))


def test_a_batch_with_a_text_only_sample_gives_transformers_logits_and_gradients(
    tiny_model, examples, tokenizer
):
    model = copy.deepcopy(tiny_model).float().train()
    record = examples[2].record
    question = record.user_text.replace("<image>", "")
    text_only = dataclasses.replace(record, image_path=None, user_text=question)
    mixed = [examples[0], tokenize_record(text_only, tokenizer, min_pixels=3136, max_pixels=3136)]
    batch = _batch(model, mixed)
    assert len(batch.image_grid_thw) == 1 and len(batch.image_positions) > 0  # one sample sees a frame
    theirs = _transformers_logits(model, batch)
    their_grads = _loss_and_grads(model, theirs)
    mine = MaskedLogits(model)(batch)
    my_grads = _loss_and_grads(model, mine)
    assert torch.equal(mine, theirs)
    for name, grad in my_grads.items():
        torch.testing.assert_close(grad, their_grads[name], rtol=1e-6, atol=1e-9, msg=name)
