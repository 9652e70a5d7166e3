"""The collator lays out [prefix | clean | noisy] by the model layer's rules and draws stratified noise."""

from __future__ import annotations

import math

import pytest
import torch

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.masks import training_mask
from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID
from wamdiff2_ros.training.collate import (
    IGNORE,
    MIN_NOISE,
    DiffusionCollator,
    model_rope_index,
    stratified_mask_ratios,
)


@pytest.fixture(scope="module")
def rope_index(tiny_model):
    return model_rope_index(tiny_model)


def test_stratified_ratios_put_one_ratio_in_each_stratum():
    for seed in range(20):
        t = stratified_mask_ratios(5, torch.Generator().manual_seed(seed))
        strata = sorted(int(v * 5 - 1e-6) for v in t.tolist())  # t = 1.0 belongs to the last stratum
        assert strata == [0, 1, 2, 3, 4]
        assert float(t.min()) >= MIN_NOISE / 5


@pytest.mark.parametrize("clean_sees_noisy", [False, True], ids=["modeling-rules", "reference-sft-collator"])
def test_batch_masks_equal_the_model_layers_training_masks(examples, rope_index, clean_sees_noisy):
    collator = DiffusionCollator(rope_index, 8, teacher_block_size=4, clean_sees_noisy=clean_sees_noisy)
    batch = collator(examples, torch.Generator().manual_seed(0))
    total = batch.input_ids.shape[1]
    for row in range(len(examples)):
        prefix_len, response_len = int(batch.prefix_lens[row]), int(batch.response_lens[row])
        length = prefix_len + 2 * response_len
        for mask, block in ((batch.attention_mask, 8), (batch.teacher_attention_mask, 4)):
            want = training_mask(prefix_len, response_len, block, clean_sees_noisy=clean_sees_noisy)
            assert torch.equal(mask[row, 0, :length, :length], want)
            # padding keys are invisible; a padding query sees only itself (no all-False SDPA row)
            assert not mask[row, 0, :length, length:].any()
            assert torch.equal(mask[row, 0, length:, length:], torch.eye(total - length, dtype=torch.bool))


def test_noisy_copy_shares_positions_and_is_labelled_only_where_masked(examples, rope_index):
    batch = DiffusionCollator(rope_index, 8)(examples, torch.Generator().manual_seed(1))
    for row, example in enumerate(examples):
        prefix_len, response_len = int(batch.prefix_lens[row]), int(batch.response_lens[row])
        answer = example.response_ids
        assert response_len == math.ceil(len(answer) / 8) * 8
        clean = batch.input_ids[row, prefix_len : prefix_len + response_len]
        noisy = slice(prefix_len + response_len, prefix_len + 2 * response_len)
        assert torch.equal(clean[: len(answer)], answer)
        assert (clean[len(answer) :] == EOS_ID).all()  # answers are padded with <|im_end|>
        positions = batch.position_ids[:, row]
        assert torch.equal(positions[:, noisy], positions[:, prefix_len : prefix_len + response_len])
        masked = batch.input_ids[row, noisy] == MASK_ID
        assert torch.equal(batch.loss_mask[row, noisy], masked)
        assert torch.equal(batch.labels[row, noisy][masked], clean[masked])
        assert (batch.labels[row, noisy][~masked] == IGNORE).all()
        assert (batch.labels[row, : prefix_len + response_len] == IGNORE).all()
        t = batch.noise_level[row, noisy].view(-1, 8)
        assert (t == t[:, :1]).all()  # one ratio per block


def test_prefix_positions_are_the_models_own_rope_index(examples, rope_index, tiny_model):
    batch = DiffusionCollator(rope_index, 4)(examples[:1], torch.Generator().manual_seed(0))
    prompt = examples[0].prompt
    want, _ = tiny_model.model.get_rope_index(
        prompt.input_ids, prompt.mm_token_type_ids, image_grid_thw=prompt.image_grid_thw
    )
    assert torch.equal(batch.position_ids[:, 0, : prompt.length], want[:, 0])


def test_full_schedule_masks_every_answer_token_with_t_one(examples, rope_index):
    batch = DiffusionCollator(rope_index, 1, schedule="full")(examples, torch.Generator().manual_seed(0))
    for row in range(len(examples)):
        prefix_len, response_len = int(batch.prefix_lens[row]), int(batch.response_lens[row])
        noisy = slice(prefix_len + response_len, prefix_len + 2 * response_len)
        assert (batch.input_ids[row, noisy] == MASK_ID).all()
        assert (batch.noise_level[row, noisy] == 1.0).all()


def test_mask_rate_follows_the_drawn_ratios(examples, rope_index):
    collator = DiffusionCollator(rope_index, 32)
    generator = torch.Generator().manual_seed(0)
    masked = total = 0
    for _ in range(40):
        batch = collator(examples[:1], generator)
        masked += int(batch.loss_mask.sum())
        total += int(batch.response_lens[0])
    # E[t] = 1/2 for stratified ratios over (0, 1]
    assert masked / total == pytest.approx(0.5, abs=0.1)


def test_collator_rejects_samples_longer_than_max_len(examples, rope_index):
    with pytest.raises(InputError, match="more than max_len 64"):
        DiffusionCollator(rope_index, 8, max_len=64)(examples, torch.Generator())


@pytest.mark.parametrize("teacher_block_size", [1, 4])
def test_teacher_targets_stop_at_the_answer_padded_to_the_teachers_block(
    examples, rope_index, teacher_block_size
):
    batch = DiffusionCollator(rope_index, 16, teacher_block_size=teacher_block_size, schedule="full")(
        examples, torch.Generator().manual_seed(0)
    )
    for row, example in enumerate(examples):
        prefix_len, response_len = int(batch.prefix_lens[row]), int(batch.response_lens[row])
        taught = math.ceil(len(example.response_ids) / teacher_block_size) * teacher_block_size
        assert taught < response_len  # the fixture's answers leave padding past the teacher's multiple
        noisy = prefix_len + response_len
        want = torch.zeros(batch.input_ids.shape[1], dtype=torch.bool)
        want[noisy : noisy + taught] = True  # every answer token is masked on the full schedule
        assert torch.equal(batch.teacher_targets[row], want)
    assert not batch.teacher_targets[~batch.loss_mask].any()
    # the host's indices: the masked positions in row-major order, the teacher targets among them
    assert torch.equal(batch.masked_positions, batch.loss_mask.flatten().nonzero()[:, 0])
    assert torch.equal(batch.taught_rows, batch.teacher_targets[batch.loss_mask].nonzero()[:, 0])
    assert torch.equal(batch.image_positions, (batch.mm_token_type_ids == 1).flatten().nonzero()[:, 0])


def test_stage_two_ignores_the_teacher_where_it_was_never_taught(examples, rope_index, tiny_model):
    from wamdiff2_ros.training.config import TrainConfig
    from wamdiff2_ros.training.forward import MaskedLogits
    from wamdiff2_ros.training.stages import distill_loss

    batch = DiffusionCollator(rope_index, 16, teacher_block_size=1, schedule="full")(
        examples, torch.Generator().manual_seed(0)
    )
    taught = batch.teacher_targets[batch.loss_mask]
    assert taught.any() and not taught.all()
    logits = torch.randn(
        len(taught), tiny_model.config.text_config.vocab_size, generator=torch.Generator().manual_seed(1)
    )
    scrambled = torch.where(taught[:, None], logits, logits.flip(-1) * 50)  # nonsense where never taught
    config = TrainConfig(stage="distill", model="tiny", teacher="tiny", out_dir="x", data={"qa": "q.json"})
    student = MaskedLogits(tiny_model)
    with torch.no_grad():
        clean, noisy = (
            distill_loss(student, lambda b, teacher_mask, t=t: t, batch, 3, config)
            for t in (logits, scrambled)
        )
    assert clean["jsd"] == noisy["jsd"] and clean["top_k_overlap"] == noisy["top_k_overlap"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run through the device tool)")
def test_a_pinned_batch_copies_without_blocking_to_the_same_values(examples, rope_index):
    collate = DiffusionCollator(rope_index, 8, schedule="stratified")
    batch = collate(examples, torch.Generator().manual_seed(0))
    pinned = batch.pin_memory()
    assert all(t.is_pinned() for t in vars(pinned).values() if isinstance(t, torch.Tensor))
    moved = pinned.to("cuda", torch.bfloat16, non_blocking=True)
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            dtype = torch.bfloat16 if name == "pixel_values" else value.dtype
            torch.testing.assert_close(getattr(moved, name).cpu(), value.to(dtype), rtol=0, atol=0, msg=name)
