"""The planning prompt is the reference's text inside the Qwen chat template, with the image expanded."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.prompt import (
    COMMAND_RULE_KEY,
    COMMANDS,
    LEGACY_COMMAND_RULE,
    MIN_INT_DIGITS_KEY,
    PLANNING_INSTRUCTION,
    answers_min_int_digits,
    build_planning_prompt,
    build_prompt,
    chat_prompt_text,
    ego_states_of_every_prompt_length,
    format_values,
    format_waypoints,
    min_int_digits_of,
    navigation_text,
    planning_user_text,
    straight_road_route,
)

# reference README.md:116, one line per row
REFERENCE_USER_LINES = [
    "Here is a front-view images from a driving vehicle: <image>",
    "The navigation information is: right",
    "The current position is (0.00,0.00)",
    "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)",
    PLANNING_INSTRUCTION,
]


def test_planning_user_text_matches_reference_sample():
    assert planning_user_text("right", (4.66, -0.09), (0.17, -1.53)).split("\n") == REFERENCE_USER_LINES


def test_chat_prompt_puts_the_image_between_the_stripped_halves():
    text = chat_prompt_text("a: <image>\nb", 3)
    assert text == (
        "<|im_start|>user\na:<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>b"
        "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_planning_prompt_tokens_end_with_the_assistant_header(planning_prompt, tokenizer):
    ids = planning_prompt.input_ids[0].tolist()
    assert tokenizer.decode(ids[-3:]) == "<|im_start|>assistant\n"
    assert ids[:3] == tokenizer("<|im_start|>user\n", add_special_tokens=False)["input_ids"]


def test_planning_prompt_has_one_pad_token_per_visual_token(planning_prompt):
    grid = planning_prompt.image_grid_thw[0].tolist()
    assert int(planning_prompt.mm_token_type_ids.sum()) == grid[0] * grid[1] * grid[2] // 4 == 20
    assert planning_prompt.pixel_values.shape[0] == grid[1] * grid[2]


def test_text_only_prompt_has_no_vision_inputs(tokenizer):
    prompt = build_prompt(tokenizer, "Why should the ego vehicle wait?", None)
    assert prompt.pixel_values is None and int(prompt.mm_token_type_ids.sum()) == 0


@pytest.mark.parametrize(
    ("text", "image", "message"),
    [
        pytest.param(
            "<image> and <image>", np.zeros((64, 64, 3), np.uint8), "2 <image>", id="two-placeholders"
        ),
        pytest.param(
            "no placeholder", np.zeros((64, 64, 3), np.uint8), "exactly one", id="image-without-mark"
        ),
        pytest.param("<image> here", None, "exactly one", id="mark-without-image"),
    ],
)
def test_prompt_and_image_mismatch_is_an_input_error(tokenizer, text, image, message):
    with pytest.raises(InputError, match=message):
        build_prompt(tokenizer, text, image)


@pytest.mark.parametrize(
    ("command", "velocity", "message"),
    [
        pytest.param("north", (1.0, 0.0), "navigation command", id="unknown-command"),
        pytest.param("left", (float("nan"), 0.0), "velocity must be two finite", id="nan-velocity"),
    ],
)
def test_bad_planning_inputs_are_input_errors(command, velocity, message):
    with pytest.raises(InputError, match=message):
        planning_user_text(command, velocity, (0.0, 0.0))


@pytest.mark.parametrize(
    ("distance_m", "text"),
    [(None, "right"), (34.6, "right in 35m"), (0.0, "right in 0m"), (250.0, "right in 99m")],
    ids=["none", "rounded", "through-the-turn", "capped"],
)
def test_a_branch_distance_is_written_as_route_guidance_says_it(distance_m, text):
    assert navigation_text("right", distance_m) == text
    if distance_m is not None:  # numpy's scalars (the simulator's arrays) write the same whole metres
        assert navigation_text("right", np.float64(distance_m)) == text
    user_text = planning_user_text("right", (1.0, 0.0), (0.0, 0.0), distance_m)
    assert f"The navigation information is: {text}\n" in user_text


@pytest.mark.parametrize("distance_m", [-1.0, float("nan"), float("inf")])
def test_a_branch_distance_that_is_not_a_distance_is_an_input_error(distance_m):
    with pytest.raises(InputError, match="branch distance"):
        navigation_text("left", distance_m)


def test_the_words_of_a_branch_distance_are_in_the_bundled_models_vocabulary(tokenizer):
    # The bundled model (and every pack from it) keeps them, so a round with distances can start from it.
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.vocab import read_kept

    kept = set(read_kept(default_model_dir()))
    for command in COMMANDS:
        text = chat_prompt_text(planning_user_text(command, (12.5, -0.3), (0.1, -1.2), 37.0), 1)
        assert set(tokenizer(text, add_special_tokens=False)["input_ids"]) <= kept


def test_a_route_ahead_is_written_like_an_answers_waypoints_after_the_word(tokenizer):
    # `branch_route`: the padded answer style, so the route's numbers are the tokens the plan writes.
    route = np.array([[9.7, -2.2], [19.3, -5.1], [28.8, -8.04], [38.4, -10.9]])
    text = "right to (09.70,-02.20,19.30,-05.10,28.80,-08.04,38.40,-10.90)"
    assert navigation_text("right", None, route) == text
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.vocab import read_kept

    kept = set(read_kept(default_model_dir()))  # a round with routes can start from the bundled model
    for command in COMMANDS:
        text = chat_prompt_text(planning_user_text(command, (12.5, -0.3), (0.1, -1.2), None, -route), 1)
        assert set(tokenizer(text, add_special_tokens=False)["input_ids"]) <= kept


@pytest.mark.parametrize(
    ("distance_m", "route"),
    [(None, np.zeros((3, 2))), (None, np.full((4, 2), np.nan)), (12.0, np.zeros((4, 2)))],
    ids=["three-points", "not-finite", "with-a-distance"],
)
def test_a_route_ahead_that_is_not_four_points_alone_is_an_input_error(distance_m, route):
    with pytest.raises(InputError, match="route"):
        navigation_text("left", distance_m, route)


def test_formatted_waypoints_parse_back():
    waypoints = np.arange(16, dtype=np.float64).reshape(8, 2) * 1.25 - 3.0
    assert np.array_equal(parse_waypoints(format_waypoints(waypoints)), np.round(waypoints, 2))


def test_padded_style_writes_two_integer_digits_and_is_recognised(tokenizer):
    waypoints = np.array([[5.0, -0.12], [10.05, 0.0], [-3.456, 101.2]] + [[0.0, 0.0]] * 5)
    padded = format_waypoints(waypoints, min_int_digits=2)
    assert padded.startswith("05.00,-00.12,10.05,00.00,-03.46,101.20,00.00")
    assert format_waypoints(waypoints).startswith("5.00,-0.12,10.05,0.00,-3.46,101.20,0.00")
    assert np.array_equal(parse_waypoints(padded), np.round(waypoints, 2))
    assert answers_min_int_digits([padded]) == 2
    assert answers_min_int_digits([format_waypoints(waypoints)]) == 1
    # below 100 m every value after the first is one separator token (",", ",-") and five characters
    small = format_waypoints(np.linspace(90, -40, 16).reshape(8, 2), min_int_digits=2)
    assert len(tokenizer(small, add_special_tokens=False)["input_ids"]) == 5 + 15 * 6

    class Config:
        pass

    config = Config()
    assert min_int_digits_of(config) == 1
    setattr(config, MIN_INT_DIGITS_KEY, 2)
    assert min_int_digits_of(config) == 2


def test_a_model_reads_the_command_rule_of_its_data_and_one_without_a_record_the_legacy_rule(tmp_path):
    from wamdiff2_ros.model.checkpoint import read_command_rule

    (tmp_path / "config.json").write_text("{}")
    assert read_command_rule(tmp_path) == LEGACY_COMMAND_RULE == "heading"
    (tmp_path / "config.json").write_text(f'{{"{COMMAND_RULE_KEY}": "branch"}}')
    assert read_command_rule(tmp_path) == "branch"


@pytest.mark.parametrize("rule", ["branch", "branch_distance", "branch_route"])
def test_every_prompt_length_an_ego_state_gives_is_among_the_enumerated_ones(tokenizer, front_image, rule):
    # The fast path captures its text-prefill graphs per prompt length at warm-up from this enumeration.
    variants = ego_states_of_every_prompt_length(tokenizer, rule)
    lengths = [build_planning_prompt(tokenizer, front_image, *variant).length for variant in variants]
    assert len(lengths) == len(set(lengths)) >= 2
    rng = np.random.default_rng(0)
    for _ in range(200):
        velocity = (float(rng.uniform(-5.0, 45.0)), float(rng.uniform(-3.0, 3.0)))
        acceleration = tuple(float(a) for a in rng.uniform(-12.0, 12.0, size=2))
        command = COMMANDS[int(rng.integers(len(COMMANDS)))]
        told = rng.random() < 0.7
        distance = float(rng.uniform(0.0, 150.0)) if rule == "branch_distance" and told else None
        route = rng.uniform(-40.0, 40.0, size=(4, 2)) if rule == "branch_route" else None
        state = (command, velocity, acceleration, distance, route)
        assert build_planning_prompt(tokenizer, front_image, *state).length in lengths


@pytest.mark.parametrize("size_hw", [(96, 128), (360, 640), (1080, 1920)], ids=["20", "220", "1980-tokens"])
def test_prompt_ids_are_the_whole_chat_text_tokenised(tokenizer, size_hw) -> None:
    # The prompt tokenises one <|image_pad|> and repeats its id; it must equal tokenising the full text.
    image = np.zeros((*size_hw, 3), np.uint8)
    for command, velocity in (("left", (4.66, -0.09)), ("unknown", (-12.25, 31.5))):
        prompt = build_planning_prompt(tokenizer, image, command, velocity, (0.17, -1.53))
        pads = int(prompt.mm_token_type_ids.sum())
        text = chat_prompt_text(planning_user_text(command, velocity, (0.17, -1.53)), pads)
        assert prompt.input_ids[0].tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_straight_road_gives_a_route_model_its_shape_and_other_models_none() -> None:
    shape = straight_road_route("branch_route")
    np.testing.assert_array_equal(shape, [[10, 0], [20, 0], [30, 0], [40, 0]])  # route_ahead's points
    assert all(straight_road_route(rule) is None for rule in ("branch", "heading", "branch_distance"))


def test_a_value_that_rounds_to_zero_is_written_without_a_sign():
    """A route-frame d of -0.001 (the projection's noise) is 00.00: the sign would be noise to learn."""
    values = np.array([-0.001, -0.004, -0.006, 0.003, -1.5])
    assert format_values(values, min_int_digits=2) == "00.00,00.00,-00.01,00.00,-01.50"
