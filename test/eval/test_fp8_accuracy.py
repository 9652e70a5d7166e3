"""``eval/fp8_accuracy.py`` on the tiny preset: every measure is there and in range."""

from __future__ import annotations

from wamdiff2_ros.eval import fp8_accuracy


def test_fp8_accuracy_reports_layers_logits_and_answers(tiny_model, tokenizer, planning_prompt) -> None:
    result = fp8_accuracy.measure(tiny_model, tokenizer, [planning_prompt], "sdpa")
    layers = tiny_model.config.text_config.num_hidden_layers
    assert len(result.layer_errors) == layers - 1  # the last layer feeds no K/V, so the prefill skips it
    assert all(0 < error < 0.1 for error in result.layer_errors)
    assert 0 < result.logits_error < 0.1 and 0 <= result.top1_agreement <= 1
    assert result.answers == 1 and 0 <= result.answers_identical <= 1 and 0 < result.token_agreement <= 1
    assert result.as_dict()["answers"] == 1
