"""Reference-format records, their tokenisation and the task mix."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.tokenizer import EOS_ID
from wamdiff2_ros.training.data import Record, epoch_order, load_records


def test_records_resolve_image_paths_against_the_json_folder(dataset_dir):
    records = load_records(dataset_dir / "planning.json", "planning")
    assert [r.id for r in records] == ["s0", "s1"]
    assert records[0].image_path == (dataset_dir / "images" / "s0.png").resolve()
    assert records[0].answer.count(",") == 15


def test_example_answer_ends_with_im_end_and_prompt_ends_with_assistant(examples, tokenizer):
    example = examples[0]
    assert int(example.response_ids[-1]) == EOS_ID
    assert tokenizer.decode(example.response_ids[:-1]) == example.record.answer
    assert tokenizer.decode(example.prompt.input_ids[0, -3:]).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ({"id": "x"}, "JSON list of records"),
        ([{"conversations": [{"from": "human", "value": "hi"}]}], "one human and one gpt turn"),
        ([{"image": ["a.png", "b.png"], "conversations": []}], "one human and one gpt turn"),
    ],
    ids=["not-a-list", "no-gpt-turn", "empty-conversations"],
)
def test_malformed_records_are_named(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError, match=match):
        load_records(path, "qa")


def test_task_weights_set_draws_per_epoch():
    records = [Record(str(i), "planning", None, "q", "a") for i in range(10)]
    records += [Record(f"q{i}", "qa", None, "q", "a") for i in range(4)]
    order = epoch_order(records, {"planning": 0.5, "qa": 2.0}, seed=0, epoch=0)
    counts = Counter(records[i].task for i in order)
    assert counts == {"planning": 5, "qa": 8}
    assert order != epoch_order(records, {"planning": 0.5, "qa": 2.0}, seed=0, epoch=1)
    assert order == epoch_order(records, {"planning": 0.5, "qa": 2.0}, seed=0, epoch=0)
