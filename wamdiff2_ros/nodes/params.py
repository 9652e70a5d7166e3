"""ROS parameters of the nodes: one table each, declared with descriptors, read into plain values.

The tables are the single source of truth: ``config/planner.yaml`` is rendered from them, comments included
(``render_parameter_file``, printed by ``wamdiff2 params``; a test checks the file equals the rendering).
Names group with dots and carry units (``input.sync_slop_s``), as Autoware does. The decoder's parameters
take their defaults and choices from ``DecodeConfig`` where the node agrees with it; where it does not, the
node's value is written out with the reason.

Importing this module needs no ROS (rclpy and rcl_interfaces load inside ``declare`` and ``descriptor``):
``wamdiff2 plan --config`` reads parameter files through these tables where no ROS is installed.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wamdiff2_ros.decoding import commit_rules, smoothing
from wamdiff2_ros.decoding.attention import resolve_backend
from wamdiff2_ros.decoding.config import BACKENDS, PLAN_STEPS, PROMPT_ATTENTIONS, WEIGHT_FORMATS, DecodeConfig
from wamdiff2_ros.eval.scoring import SELECTIONS

if TYPE_CHECKING:
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.node import Node


@dataclass(frozen=True)
class Param:
    name: str
    default: Any  # bool, int, float or str: the type is the default's
    description: str
    low: float | None = None  # inclusive range for numbers
    high: float | None = None
    choices: tuple[str, ...] = ()  # allowed values for strings
    pattern: str = ""  # regular expression a string must match in full

    def descriptor(self) -> ParameterDescriptor:
        from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

        description = self.description + (f" One of: {', '.join(self.choices)}." if self.choices else "")
        descriptor = ParameterDescriptor(name=self.name, description=description)
        if isinstance(self.default, bool) or self.low is None:
            return descriptor
        if isinstance(self.default, int):
            descriptor.integer_range = [
                IntegerRange(from_value=int(self.low), to_value=int(self.high), step=1)
            ]
        else:
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(self.low), to_value=float(self.high), step=0.0)
            ]
        return descriptor

    def check(self, value: Any) -> Any:
        """The value, or ValueError naming the parameter, its value and what is allowed."""
        if self.choices and value not in self.choices:
            raise ValueError(f"parameter {self.name} = {value!r}: must be one of {self.choices}")
        if self.pattern and not (isinstance(value, str) and re.fullmatch(self.pattern, value)):
            raise ValueError(f"parameter {self.name} = {value!r}: not of the form given: {self.description}")
        if self.low is not None and not isinstance(value, bool) and not self.low <= value <= self.high:
            raise ValueError(f"parameter {self.name} = {value!r}: must be in [{self.low}, {self.high}]")
        return value


_DECODE = DecodeConfig()  # the decoder's own defaults, which the node's decoder parameters start from

PLANNER_PARAMS: tuple[Param, ...] = (
    Param(
        "model.checkpoint",
        "",
        "Local checkpoint folder (config.json, *.safetensors); empty: model.preset, and with that empty "
        "too the bundled default model (models/default).",
    ),
    Param(
        "model.preset",
        "",
        "Random-weight preset used when no checkpoint is given (for tests and benchmarks).",
        choices=("", "tiny", "2b", "8b"),
    ),
    Param("model.device", "cpu", "Torch device of the model, e.g. cpu or cuda:0."),
    Param("model.dtype", "fp32", "Weights and activations dtype.", choices=("fp32", "bf16", "fp16")),
    Param("decoder.block_size", _DECODE.block_size, "Tokens denoised together (1 = autoregressive).", 1, 64),
    # PLAN_STEPS (8), not DecodeConfig's 32 (the reference's): on the default model the dynamic rule plans as
    # well in a third fewer forwards (decoding/config.py says why).
    Param("decoder.steps", PLAN_STEPS, "Denoising forwards allowed per block.", 1, 64),
    Param(
        "decoder.commit_rule",
        _DECODE.commit_rule,
        "Which masked tokens each step commits.",
        choices=commit_rules.names(),  # the registry's (decoding/commit_rules/)
    ),
    # sdpa, not DecodeConfig's eager (the transformers reference the fast path is tested against): a node
    # serves frames, so it takes the fast path; "auto" is resolved by decoding.attention.resolve_backend.
    Param(
        "decoder.backend",
        "sdpa",
        "Decoder forward: the fast path (static cache, lean forward; sdpa, flashinfer or triton "
        "attention) or eager (transformers, the reference it is tested against); auto: on a CUDA "
        "model.device triton where Triton is installed, else flashinfer where installed, else sdpa.",
        choices=(*BACKENDS, "auto"),
    ),
    Param(
        "decoder.cuda_graphs",
        _DECODE.cuda_graphs,
        "Replay CUDA graphs (fast backends on a CUDA device only).",
    ),
    Param(
        "decoder.compile",
        _DECODE.compile,
        "torch.compile the fast backends' lean forward (the first plan of each shape waits for the compile).",
    ),
    Param(
        "decoder.weights",
        _DECODE.weights,
        "Text-layer weights of the fast backends: bf16 (the model's own), fp8 (opt-in: W8A8 with row-wise "
        "scales, quantised at load; a full vocabulary's LM head too, without a grammar) or fp8_weight_only "
        "(opt-in: the same weights, bf16 activations, a Triton kernel); docs/DECISIONS.md says what their "
        "speed and accuracy are known to be.",
        choices=WEIGHT_FORMATS,
    ),
    Param(
        "decoder.prompt_attention",
        _DECODE.prompt_attention,
        "The prompt's attention on the fast backends: auto (flex on CUDA for flashinfer and triton, else "
        "the backend's own), sdpa, flashinfer or flex (one block-causal FlexAttention call per layer, "
        "compiled on CUDA whatever decoder.compile says).",
        choices=PROMPT_ATTENTIONS,
    ),
    Param(
        "decoder.threshold", _DECODE.threshold, "Confidence threshold of low_confidence_dynamic.", 0.01, 1.0
    ),
    Param("decoder.max_new_tokens", _DECODE.max_new_tokens, "Answer tokens at most.", 8, 1024),
    # On, unlike DecodeConfig (off: the reference decodes unconstrained): a node must publish a plan that
    # parses, so its answers are constrained.
    Param(
        "decoder.grammar",
        True,
        "Constrain the answers so they always parse: plans into 8 bounded waypoints, detections into "
        "grounding JSON with the prompt's labels.",
    ),
    Param(
        "decoder.max_step_m",
        _DECODE.max_step_m,
        "Grammar bound on each coordinate per 0.5 s step, metres.",
        1.0,
        100.0,
    ),
    # 4 candidates sampled at 0.7, not DecodeConfig's one greedy answer: the node feeds the scorer K
    # alternatives (candidate 0 stays greedy: decode_config sets greedy_first).
    Param(
        "candidates.count",
        4,
        "Candidate trajectories decoded together for the scorer (1 = none); a detection prompt decodes as "
        "many answers and fuses their boxes.",
        1,
        16,
    ),
    Param(
        "candidates.temperature",
        0.7,
        "Sampling temperature of candidates 1..K-1 (candidate 0 is greedy).",
        0.0,
        2.0,
    ),
    Param("candidates.seed", _DECODE.seed, "Seed of the candidate sampler.", 0, 2**31 - 1),
    Param(
        "warmup.image_size",
        "",
        "Camera frame size WIDTHxHEIGHT (e.g. 1920x1080) the model plans (and, with detections on, "
        "detects) once at start-up before it reports ready, so that the first real frame finds compiled "
        "code, CUDA graphs and grammar tables ready; empty: no warm-up.",
        pattern=r"|[1-9][0-9]{0,4}x[1-9][0-9]{0,4}",
    ),
    Param("input.compressed", False, "Subscribe to sensor_msgs/CompressedImage instead of Image."),
    Param(
        "input.sync_slop_s",
        0.05,
        "Largest stamp difference between a frame and its ego state, seconds.",
        0.0,
        1.0,
    ),
    Param(
        "input.max_age_s",
        0.5,
        "Frames older than this (against the node clock) are dropped, seconds.",
        0.01,
        60.0,
    ),
    Param(
        "input.twist_in_parent_frame",
        False,
        "Odometry twist is in the parent (world) frame, not the body frame.",
    ),
    Param(
        "input.use_imu",
        True,
        "Take acceleration from the IMU when fresh (input.imu_max_age_s), else differentiate velocity.",
    ),
    Param(
        "input.imu_max_age_s",
        0.2,
        "An IMU sample further than this from the odometry stamp is not used (the velocity is "
        "differentiated instead), seconds.",
        0.0,
        10.0,
    ),
    Param(
        "input.max_pixels",
        0,
        "Pixel budget of the model's image resize; 0: the checkpoint's own (its preprocessor_config.json), "
        "else the reference's 2,073,600 (1920x1080).",
        0,
        16_777_216,
    ),
    Param(
        "input.wait_for_fresher_frame",
        True,
        "When planning comes free to a frame older than half the camera period, wait for the next frame "
        "(at most a period and a quarter) instead: plans start on fresher frames (docs/DECISIONS.md).",
    ),
    Param(
        "input.frame_buffers_in_heap",
        False,
        "Keep frame-sized buffers in the C heap (glibc mallopt, nodes/allocator.py): the executor's take of "
        "a 1080p frame then costs ~3 ms under the GIL instead of ~15. Off by default: the CUDA node planned "
        "no faster with it at 20 Hz (135.7 against 136.0 ms p50) and the CPU node slower "
        "(docs/DECISIONS.md).",
    ),
    Param(
        "input.min_image_side_px",
        32,
        "Frames with a side shorter than this are rejected (one visual token covers 32x32 px; a smaller "
        "frame would be upscaled into a made-up picture), pixels.",
        1,
        4096,
    ),
    Param("output.frame_id", "base_link", "Ego frame id written into trajectory headers."),
    Param(
        "output.smoothing",
        smoothing.DEFAULT_WEIGHT,
        "Weight of the plan smoother: every candidate's waypoints are replaced by the nearest plan with "
        "small jerk from the ego's velocity (decoding/smoothing.py); 0 = the waypoints as decoded.",
        0.0,
        100.0,
    ),
    Param(
        "output.detections_every_n", 5, "Run the detection prompt after every N-th plan (0 = never).", 0, 1000
    ),
    Param(
        "output.detections_max_tokens",
        256,
        "Answer budget of the detection prompt (about 25 per box).",
        16,
        2048,
    ),
    Param(
        "fallback.mode",
        "hold",
        "On model failure: hold the last plan (shifted in time) for fallback.hold_s, stop, or publish none.",
        choices=("hold", "stop", "none"),
    ),
    Param("fallback.hold_s", 1.0, "How long a held plan stays valid, seconds.", 0.0, 10.0),
    Param(
        "fallback.rejected_input_s",
        0.5,
        "While inputs arrive but are rejected (bad encoding, non-finite state, ...), publish a fallback plan "
        "this often, seconds (fallback.mode says which).",
        0.05,
        10.0,
    ),
    Param(
        "qos.image_reliability",
        "best_effort",
        "Reliability of the camera subscription.",
        choices=("best_effort", "reliable"),
    ),
    Param("qos.image_depth", 1, "Queue depth of the camera subscription.", 1, 100),
    Param(
        "qos.route_durability",
        "transient_local",
        "Durability of the route subscription (read by branch_route models): transient_local hears a route "
        "latched before the node started; volatile hears volatile publishers.",
        choices=("transient_local", "volatile"),
    ),
    Param("diagnostics.period_s", 1.0, "Period of /diagnostics status messages, seconds.", 0.1, 60.0),
    Param(
        "diagnostics.missing_topic_s",
        2.0,
        "Once the model is ready, an image or odometry topic silent for longer is reported missing, seconds.",
        0.1,
        600.0,
    ),
    Param(
        "diagnostics.no_plan_error_s",
        3.0,
        "Once the model is ready, inputs arriving but no model plan for longer is an ERROR, seconds.",
        0.1,
        600.0,
    ),
)


SCORER_PARAMS: tuple[Param, ...] = (
    Param(
        "selection",
        "first_safe",
        "Which candidate is republished: first_safe, the first that hits no detected vehicle (the "
        "planner's greedy plan comes first; the highest PDM score when every one does), or pdm, the "
        "highest PDM score.",
        choices=SELECTIONS,
    ),
    Param(
        "stop.when_blocked",
        True,
        "When every candidate hits a detected vehicle, republish the scorer's own stop instead: the first "
        "candidate's path, braked to stand stop.margin_m short of the first vehicle on it (appended to the "
        "scored set, status DEGRADED).",
    ),
    Param("stop.margin_m", 2.0, "Gap the scorer's stop leaves to the vehicle, m.", 0.0, 20.0),
    Param("stop.max_decel_mps2", 6.0, "Hardest braking the scorer's stop plans, m/s^2.", 0.5, 12.0),
    Param(
        "corridor.lateral_bound_m",
        5.0,
        "Half width of the drivable corridor around the ego's x axis, m.",
        0.5,
        50.0,
    ),
    Param("corridor.length_m", 200.0, "How far ahead the drivable corridor reaches, m.", 10.0, 1000.0),
    Param("agents.length_m", 4.5, "Assumed length of a detected vehicle, m.", 0.5, 30.0),
    Param("agents.width_m", 1.9, "Assumed width of a detected vehicle, m.", 0.3, 5.0),
    Param(
        "detections.max_age_s",
        1.0,
        "Detections older than this (against the candidates' stamp) are ignored, s.",
        0.0,
        60.0,
    ),
    Param(
        "camera.horizontal_fov_deg",
        64.0,
        "Camera field of view when no camera_info arrived, degrees.",
        1.0,
        179.0,
    ),
    Param("camera.mount_x_m", 1.5, "Camera position ahead of the ego origin, m.", -10.0, 10.0),
    Param("camera.mount_y_m", 0.0, "Camera position left of the ego origin, m.", -5.0, 5.0),
    Param("camera.height_m", 1.6, "Camera height above the ground, m.", 0.1, 10.0),
    Param("camera.pitch_down_rad", 0.03, "Downward pitch of the camera, rad.", -0.5, 0.5),
    Param("diagnostics.period_s", 1.0, "Period of /diagnostics status messages, seconds.", 0.1, 60.0),
)


# Declared by rclpy itself on every node, so never in the tables.
RCLPY_PARAMETERS = ("use_sim_time", "start_type_description_service")

# ``wamdiff2 params --node NAME``: the node's name in parameter files and its table.
NODES: dict[str, tuple[str, tuple[Param, ...]]] = {
    "planner": ("wamdiff2_planner", PLANNER_PARAMS),
    "scorer": ("wamdiff2_scorer", SCORER_PARAMS),
}
PARAMETER_FILE_HEADER = (
    "Deployment defaults of the planner and scorer nodes (ROS 2 parameter file). Generated from the "
    "tables in wamdiff2_ros/nodes/params.py by `wamdiff2 params > config/planner.yaml`: edit the tables, "
    "not this file (test/nodes/test_params.py checks that they agree). Presets such as carla.yaml override "
    "a few values on top of this file."
)
YAML_WIDTH = 110  # the repository's line length (ruff.toml)
NBSP = "\u00a0"  # a space textwrap does not break at (allowed values stay on one comment line)


def decode_config(p: dict[str, Any]) -> DecodeConfig:
    """The decode settings a planner node with parameter values ``p`` plans with (``node_defaults()``: the
    deployment defaults)."""
    count = p["candidates.count"]
    return DecodeConfig(
        block_size=p["decoder.block_size"],
        steps=p["decoder.steps"],
        commit_rule=p["decoder.commit_rule"],
        threshold=p["decoder.threshold"],
        max_new_tokens=p["decoder.max_new_tokens"],
        grammar=p["decoder.grammar"],
        max_step_m=p["decoder.max_step_m"],
        candidates=count,
        temperature=p["candidates.temperature"] if count > 1 else 0.0,
        greedy_first=count > 1,
        seed=p["candidates.seed"],
        backend=resolve_backend(p["decoder.backend"], p["model.device"], p["model.dtype"]),
        cuda_graphs=p["decoder.cuda_graphs"],
        compile=p["decoder.compile"],
        weights=p["decoder.weights"],
        prompt_attention=p["decoder.prompt_attention"],
    )


def node_defaults(node: str = "planner") -> dict[str, Any]:
    """Every parameter of a node at its table's default (config/planner.yaml's values)."""
    return {param.name: param.default for param in NODES[node][1]}


def yaml_scalar(value: Any) -> str:
    """``value`` as a YAML scalar that reads back as the same value and type (strings double-quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    if isinstance(value, float):
        text = repr(value)  # PyYAML reads 1e-05 as a string: write such floats out in full
        return text if "e" not in text else f"{value:.20f}".rstrip("0")
    return str(value)


def allowed_values(param: Param) -> str:
    """What the parameter accepts, as the YAML comment shows it: ``(a | b)`` or ``[low, high]``; else ""."""
    if param.choices:
        return "(" + " | ".join(choice or '""' for choice in param.choices) + ")"
    if param.low is None or isinstance(param.default, bool):
        return ""
    kind = type(param.default)
    return f"[{kind(param.low)!r}, {kind(param.high)!r}]"


def _comment(text: str, indent: str, unbroken: str = "") -> list[str]:
    """``text`` (then ``unbroken``, kept on one line) as comment lines of at most ``YAML_WIDTH``."""
    width = YAML_WIDTH - len(indent) - 2
    text = f"{text} {unbroken.replace(' ', NBSP)}".rstrip()
    lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)
    return [f"{indent}# {line}".replace(NBSP, " ") for line in lines]


def render_node_yaml(node: str) -> str:
    """The parameter-file section of ``node`` (a key of ``NODES``): every parameter of its table with its
    default, under a comment of its description and allowed values.

    Raises:
        KeyError: an unknown node.
    """
    name, table = NODES[node]
    lines = [f"/**/{name}:", "  ros__parameters:"]
    for param in table:
        lines += _comment(param.description, "    ", allowed_values(param))
        lines.append(f"    {param.name}: {yaml_scalar(param.default)}")
    return "\n".join(lines) + "\n"


def render_parameter_file() -> str:
    """``config/planner.yaml`` as the tables define it: a header comment, then every node's section."""
    sections = [render_node_yaml(node) for node in NODES]
    return "\n".join(_comment(PARAMETER_FILE_HEADER, "")) + "\n\n" + "\n".join(sections)


def image_size_hw(text: str) -> tuple[int, int] | None:
    """``"WIDTHxHEIGHT"`` as (height, width); None for the empty string (``warmup.image_size``)."""
    if not text:
        return None
    width, height = (int(part) for part in text.split("x"))
    return height, width


def read_parameter_file(path: str | Path, node: str, table: tuple[Param, ...]) -> dict[str, Any]:
    """The parameters a ROS 2 parameter file sets for ``node``, checked against ``table``.

    Sections that apply: ``/**``, ``node``, ``/node`` and ``/<namespace>/node`` (``/**/node``), in file
    order (later ones win); nested mappings under ``ros__parameters`` are dotted names, as ROS reads them.
    A file without a section for the node sets nothing; parameters every rclpy node declares itself
    (``use_sim_time``, ``qos_overrides.*``, ...) are left out.

    Raises:
        ValueError: unreadable YAML, an unknown parameter, a value of the wrong type (an int where a float
            is declared, as rclpy refuses) or outside its range or choices; names the file and parameter.
        OSError: the file cannot be read.
    """
    import yaml

    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML: {error}") from error
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a ROS 2 parameter file maps node names to ros__parameters")
    declared = {param.name: param for param in table}
    values: dict[str, Any] = {}
    for section, body in document.items():
        if not (section == "/**" or str(section).split("/")[-1] == node):
            continue
        parameters = body.get("ros__parameters") if isinstance(body, dict) else None
        if not isinstance(parameters, dict):
            raise ValueError(f"{path}: section {section} has no ros__parameters mapping")
        for name, value in _flatten(parameters).items():
            if name in RCLPY_PARAMETERS or name.startswith("qos_overrides."):
                continue
            param = declared.get(name)
            if param is None:
                raise ValueError(f"{path}: {node} has no parameter {name}")
            if type(value) is not type(param.default):
                raise ValueError(
                    f"{path}: parameter {name} = {value!r} is a {type(value).__name__}, "
                    f"declared as {type(param.default).__name__}"
                )
            try:
                values[name] = param.check(value)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from error
    return values


def _flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        flat.update(_flatten(value, f"{name}.") if isinstance(value, dict) else {name: value})
    return flat


def declare(node: Node, table: tuple[Param, ...]) -> dict[str, Any]:
    """Declare every parameter of ``table`` on ``node`` and return the checked values by name.

    Raises:
        ValueError: a value outside its declared range or choices (names the parameter).
    """
    values = {}
    for param in table:
        value = node.declare_parameter(param.name, param.default, param.descriptor()).value
        values[param.name] = param.check(value)
    return values
