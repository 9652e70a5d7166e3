"""The WAM-Diff2 planning prompt and answer text, exactly as the reference writes them.

Reference: fudan-generative-vision/WAM-Diff2 README.md:103-125 (docs/REFERENCE.md §1.3).
Also the chat-templated prefix and its tensors (token ids, image patches). Decoding lives in decoding/.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import map_to_ego
from wamdiff2_ros.model.image import MAX_PIXELS, MIN_PIXELS, VisionInputs, prepare_image, prepare_image_tensor

COMMANDS = ("left", "straight", "right", "unknown")
IMAGE_PLACEHOLDER = "<image>"
PLANNING_INSTRUCTION = (
    "Instruction: Based on the visual motion cues from the image (such as the relative speed of other "
    "vehicles and the changing distance to the intersection) and the provided telemetry, predict the "
    "optimal driving action for the next 4 seconds with 8 new waypoints."
)
NUM_WAYPOINTS = 8  # 4 s at 0.5 s spacing (NAVSIM convention)
WAYPOINT_DT_S = 0.5
# The model config attribute (saved in config.json) naming the number style a model was trained on.
MIN_INT_DIGITS_KEY = "planning_min_int_digits"
# How a route becomes the navigation word (``sim.expert.navigation_command``): ``branch``, the way the route
# goes at its next junction or roundabout exit (what CARLA's route options say); ``heading``, the route's
# heading change over 50 m (ambiguous in roundabouts); ``branch_distance``, ``branch``'s word with the
# distance along the route to that branch ("right in 35m", as route guidance says it: the word alone tells
# which way, not when); ``branch_route``, ``branch``'s word with the route's shape ahead (where the road the
# route takes goes: which exit of a roundabout, how sharp a turn, what CARLA's global plan gives an agent). A
# model's config.json names the rule of its training data under COMMAND_RULE_KEY; data and models from
# before the key existed were made with the legacy rule.
COMMAND_RULES = ("branch", "heading", "branch_distance", "branch_route")
DEFAULT_COMMAND_RULE = "branch"
LEGACY_COMMAND_RULE = "heading"
COMMAND_RULE_KEY = "navigation_command_rule"
DISTANCE_COMMAND_RULE = "branch_distance"
ROUTE_COMMAND_RULE = "branch_route"
# The route's shape (``branch_route``): its points this far along it from the ego's nearest route point, in
# the route's own frame there (x along its direction, y to its left), so that a lane change or a drift off
# the centreline does not move them; written like an answer's waypoints (padded: the same tokens).
ROUTE_AHEAD_ARC_M = (10.0, 20.0, 30.0, 40.0)
STRAIGHT_ROUTE_AHEAD_M = np.stack([ROUTE_AHEAD_ARC_M, np.zeros(len(ROUTE_AHEAD_ARC_M))], axis=1)
# A branch distance is written in whole metres, at most this (two digits: a fixed set of prompt lengths).
MAX_COMMAND_DISTANCE_M = 99


def straight_road_route(command_rule: str) -> np.ndarray | None:
    """The route input of a straight road ahead for a model of ``command_rule``: the route's shape for a
    ``branch_route`` model (it read one in every prompt), None for the others (for warm-ups and benches)."""
    return STRAIGHT_ROUTE_AHEAD_M if command_rule == ROUTE_COMMAND_RULE else None


def _pair(values: Sequence[float], name: str) -> str:
    if len(values) != 2 or not all(np.isfinite(v) for v in values):
        raise InputError(f"{name} must be two finite numbers, got {values!r}")
    # Two decimals as the reference writes them; "+ 0.0" prints an exact -0.0 as 0.00.
    return f"({values[0] + 0.0:.2f},{values[1] + 0.0:.2f})"


def route_ahead(route_map: np.ndarray, position_xy: np.ndarray) -> np.ndarray:
    """The route's shape ahead (``len(ROUTE_AHEAD_ARC_M)``, 2): its points ``ROUTE_AHEAD_ARC_M`` further
    along it than its vertex nearest ``position_xy``, in the frame of the segment leaving that vertex (x
    along it, y to its left; at the last vertex, the last segment). Past the route's end it goes on
    straight. A simulator route's vertices are ~2 m apart (``sim.roads.route_polyline``), so there x moves
    in steps of up to 2 m."""
    nearest = int(np.argmin(np.linalg.norm(route_map - position_xy, axis=1)))
    segment = min(nearest, len(route_map) - 2)
    direction = route_map[segment + 1] - route_map[segment]
    ahead = route_map[nearest:]
    arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(ahead, axis=0), axis=1))])
    wanted = np.asarray(ROUTE_AHEAD_ARC_M)
    points = np.stack([np.interp(wanted, arc_m, ahead[:, k]) for k in (0, 1)], axis=1)
    beyond = wanted > arc_m[-1]
    end_direction = (route_map[-1] - route_map[-2]) / np.linalg.norm(route_map[-1] - route_map[-2])
    points[beyond] = route_map[-1] + (wanted[beyond] - arc_m[-1])[:, None] * end_direction
    return map_to_ego(points, route_map[nearest], float(np.arctan2(direction[1], direction[0])))


def navigation_text(
    command: str, distance_m: float | None = None, route_ahead_m: np.ndarray | None = None
) -> str:
    """The navigation information of the prompt: the word, ``right in 35m`` with a branch distance, or
    ``right to (10.00,00.00,19.90,-01.30,...)`` with the route's shape ahead (``ROUTE_AHEAD_ARC_M``).

    The distance is rounded to whole metres and capped at ``MAX_COMMAND_DISTANCE_M``.

    Raises:
        InputError: unknown command, a distance that is negative or not finite, a route of another shape
            or with non-finite points, or both a distance and a route.
    """
    if command not in COMMANDS:
        raise InputError(f"navigation command must be one of {COMMANDS}, got {command!r}")
    if route_ahead_m is not None:
        if distance_m is not None:
            raise InputError("a navigation command takes a branch distance or a route, not both")
        route = np.asarray(route_ahead_m, dtype=np.float64)
        if route.shape != (len(ROUTE_AHEAD_ARC_M), 2) or not np.isfinite(route).all():
            raise InputError(
                f"route ahead must be {len(ROUTE_AHEAD_ARC_M)} finite (x, y) points, got {route!r}"
            )
        return f"{command} to ({format_values(route, min_int_digits=2)})"
    if distance_m is None:
        return command
    if not np.isfinite(distance_m) or distance_m < 0.0:
        raise InputError(f"branch distance must be a finite distance >= 0 m, got {distance_m!r}")
    return f"{command} in {min(round(float(distance_m)), MAX_COMMAND_DISTANCE_M)}m"


def planning_user_text(
    command: str,
    velocity_mps: Sequence[float],
    acceleration_mps2: Sequence[float],
    distance_m: float | None = None,
    route_ahead_m: np.ndarray | None = None,
) -> str:
    """The human turn of the planning prompt, with ``<image>`` where the front image goes.

    Args:
        command: navigation command word (one of ``COMMANDS``).
        velocity_mps: ego velocity (vx, vy) in the ego frame, x forward, y left.
        acceleration_mps2: ego acceleration (ax, ay) in the ego frame.
        distance_m: distance along the route to the branch the command is about (the ``branch_distance``
            rule); None writes the word alone, as the reference does.
        route_ahead_m: the route's shape ahead (``ROUTE_AHEAD_ARC_M``; the ``branch_route`` rule) or None.

    Raises:
        InputError: unknown command, a bad distance or route, or non-finite numbers.
    """
    return "\n".join(
        (
            f"Here is a front-view images from a driving vehicle: {IMAGE_PLACEHOLDER}",
            f"The navigation information is: {navigation_text(command, distance_m, route_ahead_m)}",
            "The current position is (0.00,0.00)",
            f"The current velocity is: {_pair(velocity_mps, 'velocity')} and current accelerate is: "
            f"{_pair(acceleration_mps2, 'acceleration')}",
            PLANNING_INSTRUCTION,
        )
    )


EgoState = tuple[str, tuple[float, float], tuple[float, float], float | None, np.ndarray | None]


def ego_states_of_every_prompt_length(
    tokenizer: PreTrainedTokenizerBase, command_rule: str = DEFAULT_COMMAND_RULE
) -> list[EgoState]:
    """One (command, velocity, acceleration, distance, route) per token count the planning prompt of a model
    reading ``command_rule`` can have (|values| < 100).

    Qwen's tokenizer makes every digit its own token, so a number's tokens depend only on its sign and its
    count of integer digits: trying each of those shapes for the four numbers, with every command, meets
    every length (five for the Qwen3 tokenizer). ``branch_distance`` adds the branch distance's shapes (none,
    one digit, two), ``branch_route`` the route's (padded values: their signs). Fast paths that capture per
    prompt length warm them all.
    """
    shapes = (1.25, 12.25, -1.25, -12.25)
    distances = (None, 5.0, 35.0) if command_rule == DISTANCE_COMMAND_RULE else (None,)
    routes = (None,)
    if command_rule == ROUTE_COMMAND_RULE:
        arcs = np.asarray(ROUTE_AHEAD_ARC_M)
        routes = tuple(
            np.stack([sign_x * arcs, sign_y * arcs / 4], axis=1) for sign_x in (1, -1) for sign_y in (1, -1)
        )
    by_length: dict[int, EgoState] = {}
    for command, distance_m, route in itertools.product(COMMANDS, distances, routes):
        for vx, vy, ax, ay in itertools.product(shapes, repeat=4):
            text = chat_prompt_text(planning_user_text(command, (vx, vy), (ax, ay), distance_m, route), 1)
            length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            by_length.setdefault(length, (command, (vx, vy), (ax, ay), distance_m, route))
    return [by_length[length] for length in sorted(by_length)]


def format_waypoints(waypoints_ego: np.ndarray, min_int_digits: int = 1) -> str:
    """The answer text ``x1,y1,...,x8,y8`` with 2 decimals for an (8, 2) array in metres.

    ``min_int_digits=2`` is the padded style (``05.00,-00.12``): below 100 m every value takes the same
    tokens whatever its size, so a block-diffusion student cannot lay out ``1.08`` where it means ``10.05``
    (docs/DECISIONS.md). The reference writes the plain style (1).
    """
    waypoints_ego = np.asarray(waypoints_ego, dtype=np.float64)
    if waypoints_ego.shape != (NUM_WAYPOINTS, 2) or not np.all(np.isfinite(waypoints_ego)):
        raise InputError(
            f"waypoints must be a finite ({NUM_WAYPOINTS}, 2) array, got shape {waypoints_ego.shape}"
        )
    return format_values(waypoints_ego.reshape(-1), min_int_digits)


def format_values(values: np.ndarray, min_int_digits: int = 1) -> str:
    """Numbers as an answer writes them: comma-separated, 2 decimals, at least ``min_int_digits`` integer
    digits; a value that rounds to zero has no sign (a route-frame d of -0.001 is 00.00, not -00.00)."""
    width = min_int_digits + 3  # integer digits, the point, two decimals
    texts = [(v < 0, f"{abs(v):0{width}.2f}") for v in np.asarray(values, dtype=np.float64).reshape(-1)]
    return ",".join(("-" if negative and float(text) else "") + text for negative, text in texts)


def answers_min_int_digits(answers: Sequence[str]) -> int:
    """The number style of planning answers: 2 when every value has at least two integer digits, else 1."""
    values = [value for answer in answers for value in answer.split(",")]
    padded = bool(values) and all(len(value.lstrip("-").split(".")[0]) >= 2 for value in values)
    return 2 if padded else 1


def min_int_digits_of(config: object) -> int:
    """The number style a model writes (its config's ``MIN_INT_DIGITS_KEY``; 1 when it has none)."""
    return int(getattr(config, MIN_INT_DIGITS_KEY, 1))


def command_rule_of(config: object) -> str:
    """The navigation rule a model was trained to read (its config's ``COMMAND_RULE_KEY``; the legacy rule
    when it has none)."""
    return str(getattr(config, COMMAND_RULE_KEY, LEGACY_COMMAND_RULE))


@dataclass(frozen=True)
class PromptTensors:
    """A tokenised prompt with its image: what the prefill forward takes (batch of one)."""

    input_ids: torch.Tensor  # (1, P) int64, ends with <|im_start|>assistant\n
    mm_token_type_ids: torch.Tensor  # (1, P) int32: 1 at <|image_pad|>, else 0
    pixel_values: torch.Tensor | None  # (patches, 1536) float32, None for a text-only prompt
    image_grid_thw: torch.Tensor | None  # (1, 3) int64

    @property
    def length(self) -> int:
        """Number of prompt tokens P (visual tokens included)."""
        return int(self.input_ids.shape[1])


def chat_prompt_text(user_text: str, num_image_tokens: int) -> str:
    """The chat-templated prefix for one user turn, ending with ``<|im_start|>assistant\\n``.

    The user text is split at ``<image>`` and each side stripped, with the vision block between them, as the
    reference does (datasets.py:335-348, gpu.py:174-188); Qwen3-VL's template joins content items with nothing
    between them and adds no system turn. Only the first user turn is kept (gpu.py:194-196).

    Args:
        user_text: the human turn, with at most one ``<image>``.
        num_image_tokens: number of ``<|image_pad|>`` tokens (ignored without ``<image>``).

    Returns:
        The prompt string with special tokens spelled out.

    Raises:
        InputError: more than one ``<image>``, or an ``<image>`` with no visual tokens.
    """
    parts = user_text.split(IMAGE_PLACEHOLDER)
    if len(parts) > 2:
        raise InputError(
            f"the prompt holds {len(parts) - 1} {IMAGE_PLACEHOLDER} placeholders; one is supported"
        )
    if len(parts) == 2 and num_image_tokens <= 0:
        raise InputError(f"the prompt has {IMAGE_PLACEHOLDER} but the image has no visual tokens")
    content = parts[0].strip()
    if len(parts) == 2:
        vision = "<|vision_start|>" + "<|image_pad|>" * num_image_tokens + "<|vision_end|>"
        content = content + vision + parts[1].strip()
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def build_prompt(
    tokenizer: PreTrainedTokenizerBase,
    user_text: str,
    image: np.ndarray | Image.Image | torch.Tensor | None,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> PromptTensors:
    """Tokenise a user turn with its (optional) image into prefill tensors.

    Args:
        tokenizer: the Qwen tokenizer.
        user_text: the human turn; ``<image>`` marks where the image goes.
        image: (H, W, 3) uint8 RGB array, PIL image or tensor (preprocessed on the tensor's device by
            ``prepare_image_tensor``; arrays and PIL images take the PIL path the bundled model was trained
            on); ``None`` for a text-only prompt.
        min_pixels: smallest resized image area.
        max_pixels: largest resized image area.

    Returns:
        The prompt tensors.

    Raises:
        InputError: image and ``<image>`` placeholder disagree, or the image is unusable.
    """
    has_placeholder = IMAGE_PLACEHOLDER in user_text
    if has_placeholder != (image is not None):
        raise InputError(f"an image needs exactly one {IMAGE_PLACEHOLDER} in the prompt text, and vice versa")
    vision: VisionInputs | None = None
    if isinstance(image, torch.Tensor):
        vision = prepare_image_tensor(image, min_pixels=min_pixels, max_pixels=max_pixels)
    elif image is not None:
        vision = prepare_image(image, min_pixels=min_pixels, max_pixels=max_pixels)
    image_pad_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    # Tokenised with one <|image_pad|>, then that id repeated: a special token never merges with its
    # neighbours, so the ids are those of the whole text (test_prompt.py), without tokenising ~2,000 pads
    # (1.4 ms of a 1080p prompt).
    ids = tokenizer(chat_prompt_text(user_text, 1), add_special_tokens=False)["input_ids"]
    if vision is not None:
        at = ids.index(image_pad_id)
        ids = ids[:at] + [image_pad_id] * vision.num_tokens + ids[at + 1 :]
    input_ids = torch.tensor([ids], dtype=torch.int64)
    mm_token_type_ids = (input_ids == image_pad_id).to(torch.int32)
    if vision is not None and int(mm_token_type_ids.sum()) != vision.num_tokens:
        raise InputError(
            f"tokenised prompt has {int(mm_token_type_ids.sum())} image tokens, expected {vision.num_tokens}"
        )
    return PromptTensors(
        input_ids=input_ids,
        mm_token_type_ids=mm_token_type_ids,
        pixel_values=vision.pixel_values if vision is not None else None,
        image_grid_thw=vision.image_grid_thw if vision is not None else None,
    )


def build_planning_prompt(
    tokenizer: PreTrainedTokenizerBase,
    image: np.ndarray | Image.Image | torch.Tensor,
    command: str,
    velocity_mps: Sequence[float],
    acceleration_mps2: Sequence[float],
    distance_m: float | None = None,
    route_ahead_m: np.ndarray | None = None,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> PromptTensors:
    """The reference planning prompt (front image, command, ego state) as prefill tensors.

    Args:
        tokenizer: the Qwen tokenizer.
        image: front camera image, (H, W, 3) uint8 RGB array, PIL image or tensor (see ``build_prompt``).
        command: navigation command (``COMMANDS``).
        velocity_mps: (vx, vy) in the ego frame.
        acceleration_mps2: (ax, ay) in the ego frame.
        distance_m: distance to the command's branch (``planning_user_text``), None for the word alone.
        route_ahead_m: the route's shape ahead (``planning_user_text``), None for none.
        min_pixels: smallest resized image area.
        max_pixels: largest resized image area.

    Returns:
        The prompt tensors.

    Raises:
        InputError: bad command or distance, non-finite state, or unusable image.
    """
    user_text = planning_user_text(command, velocity_mps, acceleration_mps2, distance_m, route_ahead_m)
    return build_prompt(tokenizer, user_text, image, min_pixels=min_pixels, max_pixels=max_pixels)


DETECTION_CATEGORIES = ("car",)
DETECTION_INSTRUCTION = (
    "Locate every instance that belongs to the following categories: {categories}. "
    'Report bbox coordinates in JSON format as [{{"bbox_2d": [x1, y1, x2, y2], "label": "category"}}].'
)


def detection_user_text(categories: Sequence[str] = DETECTION_CATEGORIES) -> str:
    """The perception (grounding) prompt with the image placeholder first, as the training data asks it."""
    return f"{IMAGE_PLACEHOLDER}\n" + DETECTION_INSTRUCTION.format(categories=", ".join(categories))
