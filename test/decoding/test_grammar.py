"""Grammar-constrained planning decodes always parse into 16 bounded numbers; the automaton is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.sampling import RowSampling
from wamdiff2_ros.decoding.step import BlockBudget, constrain, denoise_step
from wamdiff2_ros.errors import InputError, ParseError
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID

ANSWER = "2.26,-0.17,4.43,-0.55,6.45,-1.18,8.33,-2.06,10.04,-3.17,11.69,-4.50,13.24,-6.22,15.59,-8.59"
RULES = ["low_confidence_dynamic", "low_confidence_static", "sequential"]
MAX_STEP_M = 20.0


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _assert_bounded_plan(text: str, max_step_m: float = MAX_STEP_M) -> None:
    waypoints = parse_waypoints(text)
    assert np.isfinite(waypoints).all()
    limits = max_step_m * np.arange(1, 9)[:, None]  # waypoint k within k steps on each axis
    assert (np.abs(waypoints) <= limits + 1e-9).all(), waypoints


def test_reference_answer_is_accepted_and_ends_in_done(grammar, tokenizer):
    assert grammar.advance(grammar.start_state, [*_ids(tokenizer, ANSWER), EOS_ID]) == grammar.done_state


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("20.01," + ANSWER[5:], id="x1-over-20m"),
        pytest.param("01.00,", id="leading-zero"),
        pytest.param("1.0,", id="one-decimal"),
        pytest.param("1.000", id="three-decimals"),
        pytest.param("-,", id="sign-without-digits"),
        pytest.param("1.00,,", id="empty-number"),
        pytest.param(".50", id="no-integer-part"),
    ],
)
def test_malformed_or_out_of_bound_prefixes_are_rejected(grammar, tokenizer, text):
    assert grammar.advance(grammar.start_state, _ids(tokenizer, text)) is None


def test_eos_is_only_allowed_after_the_sixteenth_number(grammar, tokenizer):
    fifteen = ANSWER.rsplit(",", 1)[0]
    assert grammar.advance(grammar.start_state, [*_ids(tokenizer, fifteen), EOS_ID]) is None
    assert grammar.advance(grammar.start_state, _ids(tokenizer, ANSWER + ",1.00")) is None


def test_bound_grows_with_the_waypoint_index(grammar, tokenizer):
    # waypoint 8 may be 160 m away, waypoint 1 only 20 m
    far_last = ",".join(["0.00"] * 14 + ["160.00", "-160.00"])
    assert grammar.advance(grammar.start_state, _ids(tokenizer, far_last)) is not None
    assert grammar.advance(grammar.start_state, _ids(tokenizer, "0.00,20.00")) is not None
    assert grammar.advance(grammar.start_state, _ids(tokenizer, "0.00,-20.01")) is None


def test_multi_character_comma_minus_token_is_allowed(grammar, tokenizer):
    assert tokenizer.convert_tokens_to_ids(",-") in grammar.token_ids.tolist()


def test_shortest_answer_is_80_tokens(grammar):
    assert grammar.min_tokens() == 16 * 4 + 15 + 1  # "d.dd" x 16, 15 commas, <|im_end|>


def test_allowed_tokens_respect_committed_tokens_later_in_the_block(grammar, tokenizer):
    # A committed "," at offset 4 forces "d.dd" into offsets 0..3 (no room for a sign).
    block = torch.zeros(8, dtype=torch.int64)
    masked = torch.ones(8, dtype=torch.bool)
    block[4], masked[4] = tokenizer.convert_tokens_to_ids(","), False
    allowed = grammar.block_allowed(grammar.start_state, block, masked, 8, 200)
    text = [
        {grammar.token_text[int(grammar.token_ids[c])] for c in row.nonzero().flatten()} for row in allowed
    ]
    digits = set("0123456789")
    assert text[:5] == [digits, {"."}, digits, digits, set()]
    assert "-" in text[5]


def test_budget_past_max_new_tokens_forces_the_end(grammar):
    # Only 2 positions left inside the budget and none after: no answer can finish, so nothing is allowed.
    masked = torch.ones(4, dtype=torch.bool)
    allowed = grammar.block_allowed(grammar.start_state, torch.zeros(4, dtype=torch.int64), masked, 2, 0)
    assert not allowed.any()
    assert not grammar.block_feasible(grammar.start_state, torch.zeros(4, dtype=torch.int64), masked, 2, 0)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("block_size", [1, 4, 8, 16, 32], ids=lambda b: f"B{b}")
def test_sampled_grammar_decodes_always_parse_within_bounds(
    tiny_model, tokenizer, planning_prompt, grammar, block_size, rule
):
    # Random weights are the worst case; 8 seeded candidates at a high temperature per setting.
    config = DecodeConfig(
        block_size=block_size,
        steps=8,
        commit_rule=rule,
        temperature=1.5,
        seed=block_size,
        candidates=8,
        grammar=True,
        max_new_tokens=128,
    )
    result = decode(tiny_model, tokenizer, planning_prompt, config, grammar)
    for candidate in result.candidates:
        assert candidate.stopped
        _assert_bounded_plan(candidate.text)


@pytest.mark.parametrize("block_size", [1, 4, 8, 16, 32], ids=lambda b: f"B{b}")
def test_greedy_grammar_decode_parses_with_default_rule(
    tiny_model, tokenizer, planning_prompt, grammar, block_size
):
    config = DecodeConfig(block_size=block_size, grammar=True)
    _assert_bounded_plan(decode(tiny_model, tokenizer, planning_prompt, config, grammar).text)


def test_tightest_budget_still_parses(tiny_model, tokenizer, planning_prompt, grammar):
    config = DecodeConfig(block_size=8, grammar=True, max_new_tokens=80, temperature=1.0, candidates=2)
    result = decode(tiny_model, tokenizer, planning_prompt, config, grammar)
    for candidate in result.candidates:
        _assert_bounded_plan(candidate.text)


def test_tighter_step_bound_is_respected(tiny_model, tokenizer, planning_prompt):
    config = DecodeConfig(block_size=32, grammar=True, max_step_m=2.5, temperature=1.0, candidates=2)
    for candidate in decode(tiny_model, tokenizer, planning_prompt, config).candidates:
        _assert_bounded_plan(candidate.text, max_step_m=2.5)


def test_without_grammar_the_parser_reports_what_is_wrong(tiny_model, tokenizer, planning_prompt):
    text = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(block_size=8, max_new_tokens=16)).text
    with pytest.raises(ParseError, match=r"comma-separated numbers|empty answer"):
        parse_waypoints(text)


def test_budget_below_the_shortest_answer_is_an_input_error(tiny_model, tokenizer, planning_prompt):
    with pytest.raises(InputError, match="below the 80 tokens"):
        decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(grammar=True, max_new_tokens=64))


def test_clashing_commits_keep_the_most_confident_consistent_tokens(grammar, tokenizer):
    # "-" at offset 0 and "." at offset 1 each fit alone, but "-." does not: only the surer "-" is committed.
    columns = grammar.token_ids.tolist()
    logits = torch.zeros(1, 8, len(columns))
    logits[0, 0, columns.index(tokenizer.convert_tokens_to_ids("-"))] = 20.0
    logits[0, 1, columns.index(tokenizer.convert_tokens_to_ids("."))] = 10.0
    tokens = torch.full((1, 8), MASK_ID)
    masked = torch.ones(1, 8, dtype=torch.bool)
    budget = BlockBudget(states=[grammar.start_state], limit=8, tokens_after=120)
    config = DecodeConfig(block_size=8, grammar=True)
    logits = constrain(logits, tokens, masked, config, grammar, budget, MASK_ID)
    greedy = RowSampling.of(0.0, 0, 1, False)
    tokens, masked, _, _ = denoise_step(logits, tokens, masked, 0, config, grammar, budget, greedy, 0, None)
    assert tokens[0, 0] == tokenizer.convert_tokens_to_ids("-")
    assert masked[0, 1:].all()


@pytest.fixture(scope="module")
def padded_grammar(tokenizer):
    from wamdiff2_ros.decoding.grammar import PlanningGrammar

    return PlanningGrammar(tokenizer, EOS_ID, MAX_STEP_M, min_int_digits=2)


PADDED = (
    "02.26,-00.17,04.43,-00.55,06.45,-01.18,08.33,-02.06,10.04,-03.17,11.69,-04.50,13.24,-06.22,15.59,-08.59"
)


def test_padded_style_accepts_two_digit_integer_parts_and_bounds_them(padded_grammar, tokenizer):
    end = padded_grammar.advance(padded_grammar.start_state, [*_ids(tokenizer, PADDED), EOS_ID])
    assert end == padded_grammar.done_state
    far_last = ",".join(["00.00"] * 14 + ["160.00", "-159.99"])
    assert padded_grammar.advance(padded_grammar.start_state, _ids(tokenizer, far_last)) is not None
    for text in ("2.26,", "002.26,", "020.00,", "20.01,", "00.00,-20.01", "-5.00,", "160.00,"):
        assert padded_grammar.advance(padded_grammar.start_state, _ids(tokenizer, text)) is None, text
    assert padded_grammar.min_tokens() == 16 * 5 + 15 + 1  # "dd.dd" x 16, 15 commas, <|im_end|>
    assert parse_waypoints(PADDED).tolist() == parse_waypoints(ANSWER).tolist()


def test_default_budget_holds_a_padded_plan_past_100_m(padded_grammar, tokenizer):
    # A car at 26 m/s passes 100 m within 4 s: its padded plan is longer than the 96 tokens of the shortest
    # answer, so a budget of 96 would make the grammar cut "104.44" to a 10 m waypoint.
    fast = "12.67,00.38,25.45,01.14,38.37,02.03,51.39,02.94,64.53,03.83,77.75,04.70,91.06,05.54,104.44,06.37"
    ids = [*_ids(tokenizer, fast), EOS_ID]
    assert padded_grammar.advance(padded_grammar.start_state, ids) == padded_grammar.done_state
    assert padded_grammar.min_tokens() < len(ids) <= DecodeConfig().max_new_tokens


def test_padded_grammar_decodes_parse_and_a_mismatched_grammar_is_refused(
    tiny_model, tokenizer, planning_prompt, padded_grammar
):
    config = DecodeConfig(block_size=8, steps=4, grammar=True, min_int_digits=2, max_new_tokens=128)
    result = decode(tiny_model, tokenizer, planning_prompt, config, padded_grammar)
    values = result.text.split("<|im_end|>")[0].split(",")
    assert all(len(v.lstrip("-").split(".")[0]) >= 2 for v in values), result.text
    _assert_bounded_plan(result.text)
    with pytest.raises(InputError, match="integer digits"):
        decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(grammar=True), padded_grammar)


def test_planner_decodes_in_the_number_style_its_model_was_trained_on(tokenizer, front_image):
    from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.checkpoint import LoadedModel
    from wamdiff2_ros.model.prompt import MIN_INT_DIGITS_KEY

    model = build_model("tiny", seed=0)
    setattr(model.config, MIN_INT_DIGITS_KEY, 2)  # what training on padded answers writes to config.json
    config = DecodeConfig(block_size=8, steps=4, grammar=True, max_new_tokens=128)
    planner = Planner(LoadedModel(model, tokenizer, "padded"), config)
    assert planner.config.min_int_digits == 2 and planner.with_config(steps=8).config.min_int_digits == 2
    text = planner.plan(DrivingInputs(front_image, "straight", (5.0, 0.0), (0.0, 0.0))).candidates[0].text
    values = text.split("<|im_end|>")[0].split(",")
    assert len(values) == 16 and all(len(v.lstrip("-").split(".")[0]) >= 2 for v in values), text
