"""The detection grammar accepts exactly json.dumps grounding answers; constrained decodes always parse."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode, detection_grammar
from wamdiff2_ros.decoding.grammar import DetectionGrammar, labels_in_prompt
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.forward import block_causal_hidden
from wamdiff2_ros.model.parse import parse_detections, salvage_detections
from wamdiff2_ros.model.prompt import build_prompt, detection_user_text
from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID

RULES = ["low_confidence_dynamic", "low_confidence_static", "sequential"]
ORDER_PROBLEM = "has x1 > x2 or y1 > y2"


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _answer(rng: np.random.Generator, boxes: int, labels=("car",)) -> str:
    """A canonical answer as sim/export.py writes it: ordered boxes on the 0..1000 scale, edges included."""
    items = []
    for _ in range(boxes):
        x = sorted(rng.choice([0, 1000, *rng.integers(0, 1001, 2)], 2, replace=False).tolist())
        y = sorted(rng.integers(0, 1001, 2).tolist())
        items.append({"bbox_2d": [x[0], y[0], x[1], y[1]], "label": str(rng.choice(labels))})
    return json.dumps(items)


def _assert_well_formed(text: str, labels=("car",)) -> None:
    """Canonical JSON of boxes in 0..1000 with known labels; the parser keeps every box that is ordered."""
    items = json.loads(text)
    assert json.dumps(items) == text, text  # exactly what json.dumps writes: separators, no leading zeros
    assert all(set(item) == {"bbox_2d", "label"} and item["label"] in labels for item in items), text
    assert all(len(item["bbox_2d"]) == 4 and all(0 <= v <= 1000 for v in item["bbox_2d"]) for item in items)
    detections, problems = salvage_detections(text)
    ordered = [i for i in items if i["bbox_2d"][0] <= i["bbox_2d"][2] and i["bbox_2d"][1] <= i["bbox_2d"][3]]
    assert len(detections) == len(ordered), (text, problems)
    assert all(ORDER_PROBLEM in problem for problem in problems), problems
    if len(ordered) == len(items):
        assert len(parse_detections(text)) == len(items)


@pytest.fixture(scope="module")
def detection_grammar_car(tokenizer) -> DetectionGrammar:
    return DetectionGrammar(tokenizer, EOS_ID, ("car",))


@pytest.fixture(scope="module")
def detection_kept_ids(tokenizer) -> list[int]:
    """The ids a reduced vocabulary keeps when trained on detection prompts and answers (model/vocab.py)."""
    from wamdiff2_ros.model.prompt import chat_prompt_text
    from wamdiff2_ros.model.vocab import ids_for

    rng = np.random.default_rng(1)
    texts = [chat_prompt_text(detection_user_text(), 1), *(_answer(rng, n) for n in range(6))]
    return ids_for(tokenizer, texts)


@pytest.fixture(scope="module")
def detection_prompt(tokenizer, front_image):
    return build_prompt(tokenizer, detection_user_text(), front_image)


@pytest.mark.parametrize("boxes", range(9), ids=lambda n: f"{n}-boxes")
def test_canonical_answers_are_accepted_token_by_token(detection_grammar_car, tokenizer, boxes):
    grammar = detection_grammar_car
    for seed in range(3):
        text = _answer(np.random.default_rng(100 * boxes + seed), boxes)
        ids = [*_ids(tokenizer, text), EOS_ID]
        state = grammar.start_state
        for position, token_id in enumerate(ids):
            state = grammar.advance(state, [token_id])
            assert state is not None, f"token {position} ({tokenizer.decode([token_id])!r}) refused in {text}"
        assert state == grammar.done_state


def test_the_simulators_detection_answers_are_accepted(detection_grammar_car, tokenizer):
    from wamdiff2_ros.sim.export import format_detections

    rng = np.random.default_rng(5)
    for boxes in range(6):
        corners = rng.uniform(0, [320, 180], size=(boxes, 2, 2))
        boxes_px = np.concatenate([corners.min(1), corners.max(1)], axis=1)  # (N, 4) x1, y1, x2, y2
        text = format_detections(boxes_px, ["car"] * boxes, (320, 180))
        end = detection_grammar_car.advance(
            detection_grammar_car.start_state, [*_ids(tokenizer, text), EOS_ID]
        )
        assert end == detection_grammar_car.done_state, text


def test_multi_character_tokens_of_the_canonical_answer_are_grammar_columns(detection_grammar_car, tokenizer):
    ids = _ids(tokenizer, json.dumps([{"bbox_2d": [1, 2, 3, 4], "label": "car"}] * 2))
    assert set(ids) <= set(detection_grammar_car.token_ids.tolist())
    assert {'{"', '":', " [", "],", ' "', '"},', " {", "[]"} <= set(detection_grammar_car.token_text.values())


PREFIX = '[{"bbox_2d": ['


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(PREFIX + "4,0, 460, 1000]", id="missing-space-in-box"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "car"}{"bbox_2d"', id="missing-separator"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "car"},{"bbox_2d"', id="separator-without-space"),
        pytest.param(PREFIX + "1001", id="coordinate-1001"),
        pytest.param(PREFIX + "004", id="leading-zero"),
        pytest.param(PREFIX + "10000", id="five-digits"),
        pytest.param(PREFIX + "-1", id="negative"),
        pytest.param(PREFIX + "1.5", id="decimal"),
        pytest.param(PREFIX + "1, 2, 3]", id="three-coordinates"),
        pytest.param(PREFIX + "1, 2, 3, 4, 5", id="five-coordinates"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "truck"', id="label-not-asked-for"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "carr"', id="label-too-long"),
        pytest.param('[{"label": "car"', id="keys-swapped"),
        pytest.param("[[", id="nested-list"),
        pytest.param("[ ]", id="space-in-empty-list"),
        pytest.param("[],", id="after-the-list"),
        pytest.param('```json\n[{"', id="fence"),
    ],
)
def test_malformed_prefixes_are_rejected(detection_grammar_car, tokenizer, text):
    assert detection_grammar_car.advance(detection_grammar_car.start_state, _ids(tokenizer, text)) is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("[", id="open-list"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "car"}', id="truncated-tail"),
        pytest.param(PREFIX + '1, 2, 3, 4], "label": "car"}, ', id="dangling-separator"),
        pytest.param(PREFIX + "1, 2, 3, 4", id="cut-in-a-box"),
    ],
)
def test_end_of_answer_is_only_allowed_after_the_closing_bracket(detection_grammar_car, tokenizer, text):
    state = detection_grammar_car.advance(detection_grammar_car.start_state, _ids(tokenizer, text))
    assert state is not None
    assert detection_grammar_car.advance(state, [EOS_ID]) is None


def test_tokens_after_the_end_are_free_and_do_not_keep_the_answer_open(detection_grammar_car, tokenizer):
    grammar = detection_grammar_car
    done = grammar.advance(grammar.start_state, [*_ids(tokenizer, "[]"), EOS_ID])
    assert grammar.advance(done, _ids(tokenizer, '4, 0], "label')) == grammar.done_state
    # A digit committed at offset 10 of a fresh block still lets the answer be "[]" and end at offset 1.
    block = torch.zeros(12, dtype=torch.int64)
    masked = torch.ones(12, dtype=torch.bool)
    block[10], masked[10] = _ids(tokenizer, "4")[0], False
    allowed = grammar.block_allowed(grammar.start_state, block, masked, 12, 100)
    columns = grammar.token_ids.tolist()
    assert allowed[0, columns.index(_ids(tokenizer, "[]")[0])] and allowed[1, columns.index(EOS_ID)]


def test_coordinate_bound_is_exact(detection_grammar_car, tokenizer):
    for value, ok in ((0, True), (7, True), (999, True), (1000, True), (1001, False), (2000, False)):
        text = json.dumps([{"bbox_2d": [value, 0, 1000, 1000], "label": "car"}])
        end = detection_grammar_car.advance(
            detection_grammar_car.start_state, [*_ids(tokenizer, text), EOS_ID]
        )
        assert (end == detection_grammar_car.done_state) is ok, text


def test_shortest_answer_is_the_empty_list(detection_grammar_car, tokenizer):
    assert detection_grammar_car.min_tokens() == 2  # "[]" is one Qwen token, then <|im_end|>
    end = detection_grammar_car.advance(detection_grammar_car.start_state, [*_ids(tokenizer, "[]"), EOS_ID])
    assert end == detection_grammar_car.done_state


def test_several_labels_are_accepted_and_only_those(tokenizer):
    grammar = DetectionGrammar(tokenizer, EOS_ID, ("car", "traffic light", "truck"))
    text = _answer(np.random.default_rng(3), 6, labels=("car", "traffic light", "truck"))
    assert grammar.advance(grammar.start_state, [*_ids(tokenizer, text), EOS_ID]) == grammar.done_state
    assert (
        grammar.advance(grammar.start_state, _ids(tokenizer, PREFIX + '1, 2, 3, 4], "label": "bus"')) is None
    )


def _random_walk(grammar: DetectionGrammar, rng: np.random.Generator, soft_length: int) -> list[int]:
    """A random accepted token sequence: uniform over the columns that can still finish, then, past
    ``soft_length`` tokens, only those that bring the end nearer."""
    distance, table = grammar._distance_np, grammar._next_np
    state, walk = grammar.start_state, []
    while state != grammar.done_state:
        nxt = table[state]  # (G,) next state per column
        ok = distance[nxt] < (1 << 30)
        if len(walk) >= soft_length:
            ok &= distance[nxt] < distance[state]
        column = int(rng.choice(np.flatnonzero(ok)))
        walk.append(int(grammar.token_ids[column]))
        state = int(nxt[column])
    return walk


@pytest.mark.parametrize("labels", [("car",), ("car", "truck")], ids=["car", "car-truck"])
def test_every_accepted_sequence_is_canonical_json_the_parser_reads(tokenizer, labels):
    grammar = DetectionGrammar(tokenizer, EOS_ID, labels)
    rng = np.random.default_rng(0)
    for _ in range(300):
        walk = _random_walk(grammar, rng, soft_length=int(rng.integers(1, 160)))
        assert walk[-1] == EOS_ID and EOS_ID not in walk[:-1]
        text = "".join(grammar.token_text[t] for t in walk[:-1])
        assert tokenizer.decode(walk, skip_special_tokens=True) == text
        _assert_well_formed(text, labels)


@pytest.mark.parametrize("budget", [2, 3, 8, 30, 64, 200])
def test_a_fully_masked_block_never_leaves_a_position_without_tokens(detection_grammar_car, budget):
    # From any reachable state the answer can finish in, each position of a fresh block can take some token.
    grammar = detection_grammar_car
    for state in range(grammar.num_states):
        if grammar.min_tokens(state) > budget:
            continue
        for size, after in ((1, budget - 1), (4, max(0, budget - 4)), (32, max(0, budget - 32))):
            limit = min(size, budget)
            masked = torch.ones(size, dtype=torch.bool)
            block = torch.zeros(size, dtype=torch.int64)
            assert grammar.block_feasible(state, block, masked, limit, after)
            allowed = grammar.block_allowed(state, block, masked, limit, after)
            assert allowed.any(-1).all(), (grammar.states[state], size, budget)


def test_reduced_vocabulary_grammar_uses_only_kept_tokens_and_still_accepts_the_answers(
    tokenizer, detection_kept_ids
):
    grammar = DetectionGrammar(tokenizer, EOS_ID, ("car",), vocab_ids=detection_kept_ids)
    assert set(grammar.token_ids.tolist()) <= set(detection_kept_ids)
    rng = np.random.default_rng(7)
    for boxes in range(9):
        text = _answer(rng, boxes)
        assert grammar.advance(grammar.start_state, [*_ids(tokenizer, text), EOS_ID]) == grammar.done_state
    full = DetectionGrammar(tokenizer, EOS_ID, ("car",))
    assert len(grammar.token_ids) < len(full.token_ids)  # e.g. "abel", "bo", '"c' are in no kept id


def test_labels_come_from_the_prompt():
    assert labels_in_prompt(detection_user_text()) == ("car",)
    assert labels_in_prompt(detection_user_text(("car", "traffic light"))) == ("car", "traffic light")
    with pytest.raises(InputError, match="lists no categories"):
        labels_in_prompt("<image>\nDescribe the scene.")


def test_budget_below_the_empty_answer_is_an_input_error(tokenizer):
    with pytest.raises(InputError, match="below the 2 tokens of the shortest detection answer"):
        detection_grammar(tokenizer, DecodeConfig(max_new_tokens=1), ("car",))
    with pytest.raises(InputError, match="non-empty labels"):
        DetectionGrammar(tokenizer, EOS_ID, ())


@pytest.mark.parametrize("max_new_tokens", [2, 5, 20, 40, 160])
@pytest.mark.parametrize("block_size", [1, 32], ids=lambda b: f"B{b}")
def test_greedy_grammar_decode_parses_within_any_budget(
    tiny_model, tokenizer, detection_prompt, detection_grammar_car, block_size, max_new_tokens
):
    config = DecodeConfig(block_size=block_size, steps=8, grammar=True, max_new_tokens=max_new_tokens)
    result = decode(tiny_model, tokenizer, detection_prompt, config, detection_grammar_car)
    assert result.candidates[0].stopped
    assert len(result.token_ids) < max_new_tokens
    _assert_well_formed(result.text)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("block_size", [1, 8, 32], ids=lambda b: f"B{b}")
def test_sampled_grammar_decodes_always_parse(
    tiny_model, tokenizer, detection_prompt, detection_grammar_car, block_size, rule
):
    # Random weights at a high temperature are the worst case; 4 seeded candidates per setting.
    config = DecodeConfig(
        block_size=block_size,
        steps=8,
        commit_rule=rule,
        temperature=1.5,
        seed=block_size,
        candidates=4,
        grammar=True,
        max_new_tokens=96,
    )
    for candidate in decode(
        tiny_model, tokenizer, detection_prompt, config, detection_grammar_car
    ).candidates:
        assert candidate.stopped
        _assert_well_formed(candidate.text)


@pytest.fixture(scope="module")
def closing_averse_model(tiny_model, detection_prompt, detection_grammar_car):
    """The tiny model with an untied head whose rows of every list-closing token (and <|im_end|>) point
    against the answer's hidden states: greedy decoding writes boxes until the budget forces the end."""
    model = copy.deepcopy(tiny_model)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    hidden = block_causal_hidden(model, detection_prompt, torch.full((1, 32), MASK_ID), 32)
    direction = hidden.mean(dim=(0, 1))
    text = detection_grammar_car.token_text
    closers = [t for t in text if t == EOS_ID or ("]" in text[t] and text[t] != "],")]  # "]," ends a box
    with torch.no_grad():
        model.lm_head.weight[closers] = -50.0 * direction / direction.norm() ** 2
    return model


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("max_new_tokens", [3, 40, 100, 160])
@pytest.mark.parametrize("block_size", [1, 8, 32], ids=lambda b: f"B{b}")
def test_budget_closes_an_answer_that_would_never_end(
    closing_averse_model, tokenizer, detection_prompt, detection_grammar_car, block_size, max_new_tokens, rule
):
    config = DecodeConfig(
        block_size=block_size, steps=8, commit_rule=rule, grammar=True, max_new_tokens=max_new_tokens
    )
    result = decode(closing_averse_model, tokenizer, detection_prompt, config, detection_grammar_car)
    assert result.candidates[0].stopped and len(result.token_ids) < max_new_tokens
    _assert_well_formed(result.text)
    assert (len(json.loads(result.text)) >= 1) is (max_new_tokens >= 40), result.text


@pytest.mark.parametrize("max_new_tokens", [40, 100, 160])
@pytest.mark.parametrize("block_size", [1, 8, 32], ids=lambda b: f"B{b}")
def test_with_the_default_rule_the_answer_ends_only_when_no_item_fits(
    closing_averse_model, tokenizer, detection_prompt, detection_grammar_car, block_size, max_new_tokens
):
    # Not a guarantee for every rule: a token committed far into the block that fits only after the end
    # (tokens there are free) makes the answer close before it (B32 sequential ends at 34 of 100 tokens).
    config = DecodeConfig(block_size=block_size, steps=8, grammar=True, max_new_tokens=max_new_tokens)
    result = decode(closing_averse_model, tokenizer, detection_prompt, config, detection_grammar_car)
    assert max_new_tokens - 32 < len(result.token_ids) < max_new_tokens, result.text  # an item: >= 27 tokens


def test_block_size_1_matches_ar_token_for_token_with_the_detection_grammar(
    tiny_model, tokenizer, detection_prompt, detection_grammar_car
):
    settings = {
        "block_size": 1,
        "grammar": True,
        "max_new_tokens": 48,
        "temperature": 1.0,
        "candidates": 2,
        "seed": 3,
    }
    block = decode(tiny_model, tokenizer, detection_prompt, DecodeConfig(**settings), detection_grammar_car)
    ar = decode(
        tiny_model, tokenizer, detection_prompt, DecodeConfig(decoder="ar", **settings), detection_grammar_car
    )
    assert [c.token_ids for c in block.candidates] == [c.token_ids for c in ar.candidates]
    assert all(len(c.token_ids) > 1 for c in block.candidates)


def test_fast_path_decodes_the_eager_tokens_with_the_detection_grammar(
    closing_averse_model, tokenizer, detection_prompt, detection_grammar_car
):
    settings = {"block_size": 8, "steps": 4, "grammar": True, "max_new_tokens": 64}
    eager = decode(
        closing_averse_model, tokenizer, detection_prompt, DecodeConfig(**settings), detection_grammar_car
    )
    config = DecodeConfig(backend="sdpa", **settings)
    fast = decode(closing_averse_model, tokenizer, detection_prompt, config, detection_grammar_car)
    assert fast.token_ids == eager.token_ids and len(json.loads(eager.text)) >= 1


def test_reduced_vocabulary_model_decodes_kept_tokens_that_parse(
    tiny_model, tokenizer, detection_prompt, detection_kept_ids
):
    from wamdiff2_ros.model.vocab import available_ids, reduce_vocabulary

    reduced = reduce_vocabulary(tiny_model, detection_kept_ids)
    assert available_ids(reduced) == detection_kept_ids
    for max_new_tokens in (3, 30, 100):
        config = DecodeConfig(
            block_size=32, steps=8, grammar=True, max_new_tokens=max_new_tokens, temperature=1.5, candidates=4
        )
        grammar = detection_grammar(tokenizer, config, ("car",), available_ids(reduced))
        for candidate in decode(reduced, tokenizer, detection_prompt, config, grammar).candidates:
            assert candidate.stopped and set(candidate.token_ids) <= set(detection_kept_ids)
            _assert_well_formed(candidate.text)


def test_planner_detects_with_the_grammar_by_default_and_without_it_on_request(
    tiny_model, tokenizer, front_image
):
    from wamdiff2_ros.decoding.planner import Planner
    from wamdiff2_ros.model.checkpoint import LoadedModel

    planner = Planner(
        LoadedModel(tiny_model, tokenizer, "tiny"), DecodeConfig(block_size=32, steps=8, grammar=True)
    )
    output = planner.detect(front_image, detection_user_text(), max_new_tokens=64)
    _assert_well_formed(output.text)
    assert output.decode.candidates[0].stopped
    assert set(planner._grammars._detection) == {("car",)}
    two = planner.detect(front_image, detection_user_text(("car", "truck")), max_new_tokens=64)
    _assert_well_formed(two.text, ("car", "truck"))
    free = planner.detect(front_image, detection_user_text(), max_new_tokens=16, grammar=False)
    assert not free.decode.candidates[0].stopped  # random weights never close the answer unconstrained
    off = planner.with_config(grammar=False).detect(front_image, detection_user_text(), max_new_tokens=16)
    assert off.text == free.text
    assert len(output.scores) == len(output.labels) and all(0 < s <= 1 for s in output.scores)


def test_planner_fuses_its_candidates_detection_answers(tiny_model, tokenizer, front_image):
    from wamdiff2_ros.decoding.planner import Planner
    from wamdiff2_ros.decoding.result import grounding_scores
    from wamdiff2_ros.model.box_fusion import fused_answers
    from wamdiff2_ros.model.checkpoint import LoadedModel

    config = DecodeConfig(
        block_size=32, steps=8, grammar=True, candidates=3, temperature=1.0, greedy_first=True
    )
    planner = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), config)
    fused = planner.detect(front_image, detection_user_text(), max_new_tokens=64)  # the planner's K = 3
    alone = planner.detect(front_image, detection_user_text(), max_new_tokens=64, candidates=1)
    assert len(fused.decode.candidates) == 3 and len(alone.decode.candidates) == 1
    assert fused.text == alone.text  # the greedy answer is the first row either way
    answers = [(c.text, grounding_scores(tokenizer, c)) for c in fused.decode.candidates]
    expected, _ = fused_answers(answers, front_image.shape[1::-1])
    np.testing.assert_array_equal(fused.boxes_px, expected.boxes)
    assert fused.scores == expected.scores and fused.labels == expected.labels
