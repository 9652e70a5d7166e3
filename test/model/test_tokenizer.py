"""The bundled Qwen tokenizer loads offline with the Qwen3-VL special ids and splits answers as measured."""

from __future__ import annotations

from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID, SpecialIds

REFERENCE_ANSWER = (
    "2.26,-0.17,4.43,-0.55,6.45,-1.18,8.33,-2.06,10.04,-3.17,11.69,-4.50,13.24,-6.22,15.59,-8.59"
)


def test_special_tokens_have_qwen3_vl_ids(tokenizer):
    ids = SpecialIds()
    names = ["<|im_end|>", "<|im_start|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    expected = [ids.eos, ids.im_start, ids.vision_start, ids.vision_end, ids.image_pad]
    assert tokenizer.convert_tokens_to_ids(names) == expected
    assert EOS_ID == 151645


def test_mask_id_is_a_spare_row_outside_the_tokenizer(tokenizer):
    assert len(tokenizer) <= MASK_ID < 151936


def test_reference_answer_is_83_tokens_with_comma_minus_as_one(tokenizer):
    ids = tokenizer(REFERENCE_ANSWER, add_special_tokens=False)["input_ids"]
    assert len(ids) == 83
    assert tokenizer.convert_tokens_to_ids(",-") in ids
    assert tokenizer.decode(ids) == REFERENCE_ANSWER
