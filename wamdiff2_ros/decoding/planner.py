"""Plan one camera frame: reference prompt -> decode K candidates -> parsed ego-frame waypoints.

This is the model-facing service the ROS planner node, the closed-loop simulator and the CLI share. It knows
nothing of ROS messages, fallbacks or timing policy: a candidate whose answer does not parse comes back with
the parser's reason instead of waypoints, and the caller decides what to do.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.engine import AnswerGrammars, decode
from wamdiff2_ros.decoding.fast import FastEngine
from wamdiff2_ros.decoding.grammar import labels_in_prompt
from wamdiff2_ros.decoding.result import grounding_scores
from wamdiff2_ros.decoding.smoothing import smooth_waypoints
from wamdiff2_ros.errors import InputError, ParseError
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.box_fusion import fused_answers
from wamdiff2_ros.model.checkpoint import LoadedModel, load_checkpoint
from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.plan_frame import (
    DEFAULT_PLAN_FRAME,
    STRAIGHT_ROAD_ROUTE_EGO,
    plan_frame_of,
    plan_to_ego,
)
from wamdiff2_ros.model.prompt import (
    MAX_PIXELS,
    NUM_WAYPOINTS,
    ROUTE_COMMAND_RULE,
    build_planning_prompt,
    build_prompt,
    command_rule_of,
    detection_user_text,
    ego_states_of_every_prompt_length,
    min_int_digits_of,
    straight_road_route,
)
from wamdiff2_ros.model.tokenizer import load_tokenizer
from wamdiff2_ros.model.vocab import available_ids


@dataclass(frozen=True)
class DrivingInputs:
    """What the planning prompt is built from.

    Attributes:
        image_rgb: (H, W, 3) uint8 front camera frame, RGB.
        command: navigation command word (``left``, ``straight``, ``right``, ``unknown``).
        velocity_mps: (vx, vy) in the ego frame (x forward, y left).
        acceleration_mps2: (ax, ay) in the ego frame.
        command_distance_m: distance along the route to the command's branch, for a model trained on the
            ``branch_distance`` rule (``model.prompt.planning_user_text``); None where unknown.
        route_ahead_m: the route's shape ahead (``model.prompt.ROUTE_AHEAD_ARC_M``), for a model trained
            on the ``branch_route`` rule; None where unknown.
        route_ego_m: the route's polyline around the ego (M, 2) in the ego frame
            (``model.plan_frame.route_window_ego``), for a model that writes its plans along the route;
            None where unknown.
    """

    image_rgb: np.ndarray
    command: str
    velocity_mps: tuple[float, float]
    acceleration_mps2: tuple[float, float]
    command_distance_m: float | None = None
    route_ahead_m: np.ndarray | None = None
    route_ego_m: np.ndarray | None = None


@dataclass(frozen=True)
class PlannedCandidate:
    """One decoded answer: its waypoints when it parsed (smoothed by the planner's ``smoothing``), else the
    reason it did not."""

    text: str
    seed: int
    waypoints_ego: np.ndarray | None  # (8, 2) metres, x forward, y left, 0.5 s apart
    parse_error: str = ""


@dataclass(frozen=True)
class DetectionOutput:
    """Boxes in pixels of the source image (x1, y1, x2, y2), their labels, the raw answer and its cost.

    ``parse_error`` says which items of the answer were rejected (malformed, or cut off by the token budget);
    the boxes are the items that were well formed. ``scores`` are the model's confidence in each box
    (``model.parse.grounding_item_scores``); empty: unscored.
    """

    boxes_px: np.ndarray  # (N, 4)
    labels: tuple[str, ...]
    text: str
    decode: DecodeResult
    parse_error: str = ""
    scores: tuple[float, ...] = ()


STAGES = ("preprocess", "vision", "prefill", "decode", "parse")


@dataclass(frozen=True)
class PlanOutput:
    """The candidates of one frame, the decode's costs, the settings, and the seconds of each stage.

    ``stages_s`` keys are ``STAGES``: the frame to prompt tensors (resize, normalise, patchify, tokenise;
    on the model's device when it is a GPU), the vision tower, the text prefill, the decode after it, and
    parsing the answers. The vision/prefill split is measured by the fast path only (eager: all in prefill).
    """

    candidates: tuple[PlannedCandidate, ...]
    decode: DecodeResult
    config: DecodeConfig
    stages_s: dict[str, float] = field(default_factory=dict)


class Planner:
    """A loaded model plus decode settings; ``plan`` turns driving inputs into candidate trajectories.

    Args:
        loaded: model and tokenizer (``load_checkpoint`` or ``Planner.from_settings``).
        config: decode settings; ``config.candidates`` answers are decoded in one batch.
        max_pixels: pixel budget of the image resize; None: the checkpoint's own (the budget it was trained
            with), else the reference's 2,073,600.
        smoothing: weight of the plan smoother (``smoothing.smooth_waypoints``) applied to every parsed
            candidate; 0: the waypoints as decoded (the answer text is always the model's).

    The grammar's number style is the model's (``min_int_digits`` of its config), whatever ``config`` says.
    ``config.grammar`` constrains both answers, plans and detections; grammars are built over the ids the
    model can emit (a reduced vocabulary writes no others).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        config: DecodeConfig,
        max_pixels: int | None = None,
        smoothing: float = 0.0,
    ) -> None:
        self.loaded = loaded
        self.smoothing = smoothing
        self.config = replace(config, min_int_digits=min_int_digits_of(loaded.model.config))
        self.max_pixels = max_pixels or loaded.max_pixels or MAX_PIXELS
        self.name = Path(loaded.source).name or loaded.source
        self.command_rule = command_rule_of(loaded.model.config)
        self.plan_frame = plan_frame_of(loaded.model.config)  # where its answers are: ego or along the route
        # The grammars' token automata are built once per bound or label set (about 0.2 s each on a CPU).
        self._grammars = AnswerGrammars(loaded.tokenizer, self.config, available_ids(loaded.model))
        self._grammar = self._grammars.planning() if self.config.grammar else None
        # The fast path's owner (caches, compiled code, CUDA graphs: built once, reused every frame), made on
        # first use and shared with every ``with_config`` copy.
        self._engines: dict[str, FastEngine] = {}

    @classmethod
    def from_settings(
        cls,
        config: DecodeConfig,
        *,
        checkpoint: str | Path | None = None,
        preset: str = "",
        device: str = "cpu",
        dtype: str = "fp32",
        max_pixels: int | None = None,
        smoothing: float = 0.0,
    ) -> Planner:
        """Load a checkpoint folder; else build a random-weight ``preset``; with neither, load the bundled
        default model (``smoothing``: as the constructor's).

        Raises:
            CheckpointError: the checkpoint folder is missing, incomplete or corrupt, or (with neither
                given) there is no bundled default model.
        """
        if checkpoint or not preset:
            loaded = load_checkpoint(checkpoint or default_model_dir(), dtype=dtype, device=device)
        else:
            model = build_model(preset, dtype=dtype, device=device)
            loaded = LoadedModel(model=model, tokenizer=load_tokenizer(), source=f"preset:{preset}")
        return cls(loaded, config, max_pixels, smoothing)

    @property
    def fast(self) -> FastEngine | None:
        """The model's fast engine when the config takes the fast path, else None."""
        if self.config.backend == "eager":
            return None
        if "fast" not in self._engines:
            self._engines["fast"] = FastEngine(self.loaded.model)
        return self._engines["fast"]

    @property
    def bound_m(self) -> float:
        """Largest |coordinate| a plan may have: 8 steps of ``max_step_m``."""
        return NUM_WAYPOINTS * self.config.max_step_m

    def with_config(self, **changes) -> Planner:
        """The same model with some decode settings changed (the grammar is rebuilt only if it must be)."""
        planner = Planner.__new__(Planner)
        planner.__dict__.update(self.__dict__)  # every attribute; the engines shared: built once
        planner.config = replace(self.config, **{**changes, "min_int_digits": self.config.min_int_digits})
        bound_and_budget = ("max_step_m", "max_new_tokens")  # what the grammars are built and checked for
        if all(getattr(planner.config, k) == getattr(self.config, k) for k in bound_and_budget):
            planner._grammars = self._grammars  # every grammar built so far still holds
        else:
            planner._grammars = AnswerGrammars(
                self.loaded.tokenizer, planner.config, self._grammars.vocab_ids
            )
        planner._grammar = planner._grammars.planning() if planner.config.grammar else None
        return planner

    @torch.inference_mode()
    def plan(self, inputs: DrivingInputs) -> PlanOutput:
        """Decode ``config.candidates`` planning answers for one frame.

        Raises:
            InputError: unusable image, unknown command or non-finite state (from the prompt builder); no
                route for a model that reads one (it had one in every prompt), or one for another model; no
                route polyline for a model that plans along it, or one for another model.
        """
        if (self.command_rule == ROUTE_COMMAND_RULE) != (inputs.route_ahead_m is not None):
            given = "none" if inputs.route_ahead_m is None else "one"
            raise InputError(f"{self.name} reads the {self.command_rule} rule; route's shapes given: {given}")
        if (self.plan_frame != DEFAULT_PLAN_FRAME) != (inputs.route_ego_m is not None):
            given = "none" if inputs.route_ego_m is None else "one"
            raise InputError(
                f"{self.name} plans in the {self.plan_frame} frame; route polylines given: {given}"
            )
        started = time.perf_counter()
        prompt = build_planning_prompt(
            self.loaded.tokenizer,
            self._frame(inputs.image_rgb),
            inputs.command,
            inputs.velocity_mps,
            inputs.acceleration_mps2,
            inputs.command_distance_m,
            inputs.route_ahead_m,
            max_pixels=self.max_pixels,
        )
        preprocess_s = time.perf_counter() - started
        result = self._decode(prompt, self.config, self._grammar)
        parsing = time.perf_counter()
        candidates = tuple(self._parse(c.text, c.seed, inputs) for c in result.candidates)
        stages = {
            "preprocess": preprocess_s,
            "vision": result.vision_s,
            "prefill": result.prefill_s - result.vision_s,
            "decode": result.latency_s - result.prefill_s,
            "parse": time.perf_counter() - parsing,
        }
        return PlanOutput(candidates, result, self.config, stages)

    def warm_up(
        self, image_hw: tuple[int, int], *, detect: bool = False, detect_max_tokens: int = 256
    ) -> float:
        """Plan (and detect) twice on a seeded frame of the camera's size, so that the first real frame
        finds every cache allocated, every kernel compiled and every CUDA graph captured; returns seconds.

        Args:
            image_hw: the camera's (height, width) in pixels.
            detect: warm the detection prompt too (the node runs it every N-th plan).
            detect_max_tokens: the detection answer budget the node will use.
        """
        started = time.perf_counter()
        frame = np.random.default_rng(0).integers(0, 256, size=(*image_hw, 3), dtype=np.uint8)
        inputs = self.on_a_straight_road(DrivingInputs(frame, "straight", (8.0, 0.0), (0.0, 0.0)))
        for _ in range(2):  # the second run is what a frame sees: it must find everything built
            self.plan(inputs)
            if detect:
                self.detect(frame, detection_user_text(), detect_max_tokens)
        if self.config.cuda_graphs:  # the text prefill's graphs are per prompt length: the ego state's digits
            for state in ego_states_of_every_prompt_length(self.loaded.tokenizer, self.command_rule):
                self.plan(replace(DrivingInputs(frame, *state), route_ego_m=inputs.route_ego_m))
        return time.perf_counter() - started

    def on_a_straight_road(self, inputs: DrivingInputs) -> DrivingInputs:
        """``inputs`` with the route inputs of a straight road that the model reads (its shape ahead for a
        ``branch_route`` model, its polyline for one that plans along it), for warm-ups and benches."""
        along = self.plan_frame != DEFAULT_PLAN_FRAME
        return replace(
            inputs,
            route_ahead_m=straight_road_route(self.command_rule),
            route_ego_m=STRAIGHT_ROAD_ROUTE_EGO if along else None,
        )

    def _frame(self, image_rgb: np.ndarray) -> np.ndarray | torch.Tensor:
        """The frame as the prompt builder should take it: uploaded once to a GPU model's device (resized
        and patchified there), else the array (the CPU's PIL path, which the bundled model was trained on)."""
        device = self.loaded.model.device
        if device.type != "cuda":
            return image_rgb
        return torch.from_numpy(np.ascontiguousarray(image_rgb)).to(device, non_blocking=True)

    def _decode(self, prompt, config: DecodeConfig, grammar) -> DecodeResult:
        return decode(self.loaded.model, self.loaded.tokenizer, prompt, config, grammar, fast=self.fast)

    @torch.inference_mode()
    def detect(
        self,
        image_rgb: np.ndarray,
        user_text: str,
        max_new_tokens: int = 256,
        *,
        grammar: bool | None = None,
        labels: Sequence[str] | None = None,
        candidates: int | None = None,
        temperature: float | None = None,
    ) -> DetectionOutput:
        """Run a grounding prompt on one frame and return boxes in source pixels, each with its score.

        With the grammar the answer is always well-formed grounding JSON naming only the prompt's categories,
        closed within the budget; only boxes written with x1 > x2 or y1 > y2 can still be rejected. With
        more than one candidate (the planner's K by default) the first answer is greedy, the others sampled
        (seeds ``config.seed + k``), and their boxes are fused (``model.box_fusion``): the output's text
        and ``parse_error`` are the greedy answer's, its boxes and scores the fusion's.

        Args:
            image_rgb: (H, W, 3) uint8 frame.
            user_text: the perception prompt with ``<image>`` (the training data's, e.g.
                ``model.prompt.detection_user_text()``).
            max_new_tokens: answer budget (a box costs about 25 tokens).
            grammar: constrain the answer by the detection grammar; None: as ``config.grammar`` says.
            labels: the labels an answer may name; None: the categories the prompt lists.
            candidates: answers decoded together and fused (1: the greedy answer alone); None:
                ``config.candidates``, the rows a plan decodes.
            temperature: the sampled answers' temperature; None: ``config.temperature``.

        Raises:
            InputError: unusable image, a prompt without the image placeholder, or (with the grammar) no
                labels given or listed in the prompt, or a budget below the shortest answer.
        """
        prompt = build_prompt(
            self.loaded.tokenizer, user_text, self._frame(image_rgb), max_pixels=self.max_pixels
        )
        constrained = self.config.grammar if grammar is None else grammar
        rows = self.config.candidates if candidates is None else candidates
        config = replace(
            self.config,
            grammar=constrained,
            candidates=rows,
            temperature=(self.config.temperature if temperature is None else temperature)
            if rows > 1
            else 0.0,
            greedy_first=True,
            max_new_tokens=max_new_tokens,
        )
        answer_grammar = None
        if constrained:
            answer_grammar = self._grammars.detection(labels or labels_in_prompt(user_text))
        result = self._decode(prompt, config, answer_grammar)
        height, width = image_rgb.shape[:2]
        answers = [(c.text, grounding_scores(self.loaded.tokenizer, c)) for c in result.candidates]
        fused, problems = fused_answers(answers, (width, height))
        return DetectionOutput(
            fused.boxes, fused.labels, result.text, result, "; ".join(problems), fused.scores
        )

    def _parse(self, text: str, seed: int, inputs: DrivingInputs) -> PlannedCandidate:
        try:
            values = parse_waypoints(text, max_abs_m=self.bound_m)
        except ParseError as error:
            return PlannedCandidate(text, seed, None, str(error))
        waypoints = plan_to_ego(values, self.plan_frame, inputs.route_ego_m)
        if not np.isfinite(waypoints).all():  # a degenerate route polyline; never an answer's own numbers
            return PlannedCandidate(text, seed, None, "the route gave non-finite waypoints")
        return PlannedCandidate(text, seed, smooth_waypoints(waypoints, inputs.velocity_mps, self.smoothing))

    def memory_allocated_mb(self) -> float | None:
        """MiB of the model device's memory held by tensors (torch's allocator), or None on a CPU model."""
        device = self.loaded.model.device
        if device.type != "cuda":
            return None
        return torch.cuda.memory_allocated(device) / 2**20

    @staticmethod
    def is_out_of_memory(error: BaseException) -> bool:
        """Whether a failed ``plan`` or ``detect`` ran out of device memory (torch's OutOfMemoryError, or
        another error saying "out of memory", as some kernels and allocators raise); ``release_memory`` then
        gives the cached blocks back before the next frame."""
        return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()

    def release_memory(self) -> None:
        """Give the CUDA allocator's cached, unused blocks back to the device (after an out-of-memory error);
        nothing on a CPU model. What the model, caches and CUDA graphs hold stays allocated."""
        if self.loaded.model.device.type == "cuda":
            torch.cuda.empty_cache()
