"""Checkpoints round-trip bit-identically; broken, tampered or unsafe folders fail with errors naming why."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from wamdiff2_ros.errors import CheckpointError
from wamdiff2_ros.model.checkpoint import (
    INDEX,
    MANIFEST,
    PREPROCESSOR,
    PROCESSOR,
    WEIGHTS,
    load_checkpoint,
    read_pixel_budget,
    save_checkpoint,
)
from wamdiff2_ros.model.forward import block_causal_logits


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_model, tokenizer):
    return save_checkpoint(tiny_model, tmp_path_factory.mktemp("ckpt"), tokenizer)


@pytest.fixture
def copy(saved, tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(saved, target)
    return target


def test_saved_checkpoint_loads_bit_identical(saved, tiny_model):
    loaded = load_checkpoint(saved).model
    original, restored = tiny_model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    for name, tensor in original.items():
        assert restored[name].dtype == tensor.dtype, name
        assert torch.equal(restored[name], tensor), name
    assert loaded.lm_head.weight is loaded.model.language_model.embed_tokens.weight


def test_loaded_checkpoint_gives_identical_logits(saved, tiny_model, planning_prompt):
    loaded = load_checkpoint(saved).model
    response = torch.full((1, 8), 151671)
    assert torch.equal(
        block_causal_logits(loaded, planning_prompt, response, 4),
        block_causal_logits(tiny_model, planning_prompt, response, 4),
    )


def test_checkpoint_loads_in_bf16(saved, tiny_model):
    loaded = load_checkpoint(saved, dtype="bf16").model
    embed = loaded.model.language_model.embed_tokens.weight
    assert embed.dtype == torch.bfloat16
    assert torch.equal(embed, tiny_model.model.language_model.embed_tokens.weight.to(torch.bfloat16))


def test_checkpoint_brings_its_tokenizer(saved, tokenizer):
    loaded = load_checkpoint(saved).tokenizer
    text = "2.26,-0.17<|im_end|>"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_missing_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")


def test_missing_config_is_a_checkpoint_error(copy):
    (copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json is missing"):
        load_checkpoint(copy)


def test_truncated_weights_are_a_checkpoint_error(copy):
    (copy / MANIFEST).unlink()  # without the manifest, safetensors' own size check must catch it
    data = (copy / WEIGHTS).read_bytes()
    (copy / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(copy)


def test_tampered_weights_fail_the_manifest_check(copy):
    data = bytearray((copy / WEIGHTS).read_bytes())
    data[-5] ^= 0xFF  # one flipped bit pattern in tensor data: only a checksum can see it
    (copy / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="tampered or corrupt"):
        load_checkpoint(copy)


def test_corrupt_header_is_a_checkpoint_error(copy):
    (copy / MANIFEST).unlink()
    data = bytearray((copy / WEIGHTS).read_bytes())
    data[8:16] = b"\x00{{{{{{{"
    (copy / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(copy)


def test_pickle_weights_are_refused(copy):
    (copy / WEIGHTS).rename(copy / "pytorch_model.bin")
    (copy / MANIFEST).unlink()
    with pytest.raises(CheckpointError, match="pickle formats are never loaded"):
        load_checkpoint(copy)


def test_weights_that_do_not_match_the_config_are_refused(copy):
    config = json.loads((copy / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 3
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"1[0-9]* missing"):
        load_checkpoint(copy)


def test_unknown_model_type_is_refused(copy):
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = "llama"
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model_type 'llama'"):
        load_checkpoint(copy)


def test_wam_diff2_model_type_is_accepted(copy, tiny_model):
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = "wam_diff2"
    (copy / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(copy).model
    assert torch.equal(loaded.lm_head.weight, tiny_model.lm_head.weight)


def test_pixel_budget_travels_with_the_checkpoint(tiny_model, tmp_path):
    folder = save_checkpoint(tiny_model, tmp_path / "ckpt", pixels=(3136, 12544))
    assert read_pixel_budget(folder) == (3136, 12544)
    assert load_checkpoint(folder).max_pixels == 12544
    assert load_checkpoint(save_checkpoint(tiny_model, tmp_path / "plain")).max_pixels is None


@pytest.mark.parametrize("content", ['{"min_pixels": 10}', '{"min_pixels": 9, "max_pixels": 4}', "not json"])
def test_bad_pixel_budget_is_a_checkpoint_error(copy, content):
    (copy / PREPROCESSOR).write_text(content)
    with pytest.raises(CheckpointError, match=PREPROCESSOR):
        load_checkpoint(copy)


def test_a_folder_written_by_transformers_save_pretrained_loads(tiny_model, tokenizer, tmp_path):
    # The layout Hugging Face publishes Qwen3-VL models in: sharded safetensors with their index, and the
    # image processor's budget as size.shortest_edge / size.longest_edge (no min_pixels / max_pixels).
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = tmp_path / "hf"
    tiny_model.save_pretrained(folder, max_shard_size="2MB")
    tokenizer.save_pretrained(folder)
    Qwen2VLImageProcessorPil(
        min_pixels=3136, max_pixels=200_704, patch_size=16, merge_size=2
    ).save_pretrained(folder)
    assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1 and (folder / INDEX).is_file()
    assert "min_pixels" not in json.loads((folder / PREPROCESSOR).read_text())
    loaded = load_checkpoint(folder)
    assert loaded.max_pixels == 200_704 and read_pixel_budget(folder) == (3136, 200_704)
    for name, tensor in tiny_model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_the_budget_is_read_from_processor_config_when_no_preprocessor_config(copy):
    # transformers 5 writes a processor's image settings under "image_processor" in processor_config.json.
    (copy / PREPROCESSOR).unlink(missing_ok=True)
    settings = {"image_processor": {"size": {"shortest_edge": 12_544, "longest_edge": 1_003_520}}}
    (copy / PROCESSOR).write_text(json.dumps({"processor_class": "Qwen3VLProcessor", **settings}))
    assert read_pixel_budget(copy) == (12_544, 1_003_520)
    assert load_checkpoint(copy).max_pixels == 1_003_520


def test_a_size_budget_that_is_not_integers_names_both_forms(copy):
    (copy / PREPROCESSOR).write_text(json.dumps({"size": {"shortest_edge": "small", "longest_edge": 4}}))
    with pytest.raises(CheckpointError, match=r"size\.shortest_edge"):
        load_checkpoint(copy)
