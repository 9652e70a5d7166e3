"""Dataset generation: drives from seeded scenes, sampled every second, written as images and JSON files.

Layout of an output folder: ``images/<id>.png``, ``planning.json``, ``detection.json``, ``qa.json`` (reference
records), ``ground_truth.jsonl`` (one line per sample for evaluation), ``camera.json`` (intrinsics and mount)
and, with bags on, ``bags/drive_<episode>/`` (one MCAP drive per episode). Episodes run in worker processes;
the output is identical for any worker count.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera, CameraIntrinsics, CameraMount
from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME, check_plan_frame
from wamdiff2_ros.model.prompt import COMMAND_RULES, DEFAULT_COMMAND_RULE, LEGACY_COMMAND_RULE
from wamdiff2_ros.sim import export
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.expert import (
    GroundTruth,
    ground_truth,
    navigation,
    record_drive,
    sample_indices,
)
from wamdiff2_ros.sim.ordered_pool import ordered_results
from wamdiff2_ros.sim.render import encode_png, render_front
from wamdiff2_ros.sim.scenes import SCENE_KINDS, make_scene

NAVIGATION_FILE = "navigation.json"  # the command rule of the folder's prompts, the frame of its plans
TRAIN_WIDTH_PX = 640  # 640x360 keeps NAVSIM's aspect ratio at about 220 Qwen3-VL visual tokens


@dataclass(frozen=True)
class GenerateConfig:
    """What to generate and where.

    Attributes:
        out_dir: output folder (created; existing files with the same names are overwritten).
        samples: number of samples to write.
        seed: base seed; episode ``e`` uses scene seed ``episode_seed(seed, e)``.
        camera: the camera (its intrinsics set the image size).
        episode_s: simulated length of a drive, the 4 s expert horizon included.
        stride_s: time between samples of one drive.
        bags: also write one MCAP drive per episode (every tick rendered).
        workers: worker processes (0: one per CPU core).
        min_int_digits: number style of the planning answers (1 plain, 2 padded: ``05.00``).
        standing_starts: fraction of episodes whose ego starts at rest, sampled from t = 0: the expert moving
            off from a standstill, which a model that stopped must learn to do (drawn per episode seed;
            0 leaves every episode as it was).
        highway_events_only: every drive is a highway scene with a braking lead car or a stopped car ahead
            (``make_scene``): the situations in which the ego must brake or change lanes, rare otherwise.
        scene_kind: every drive of this kind (``scenes.SCENE_KINDS``; None: drawn from each seed, mostly
            highways): more of the junctions, where turns are a few per cent of a mixed set's samples.
        first_sample_s: time of a drive's first sample (a standing start's is 0 whatever this says). The
            closed loop plans from t = 0, where a highway event can leave a second to brake: 0 labels those
            states, the default 1 s leaves the drive's start out.
        label_last_states: DAgger data only (``sim.dagger``): also label the states of an episode's last
            4 s, driving the scene on past its end for the other vehicles' futures. Without it a rollout
            that ends in a collision within 4 s of a state gives no sample of it, so the states that lead
            to a collision are the ones never labelled.
        command_rule: how the route becomes the navigation command (``model.prompt.COMMAND_RULES``),
            recorded in the folder's ``navigation.json``.
        plan_frame: the frame the planning answers are written in (``model.plan_frame.PLAN_FRAMES``),
            recorded there too.
    """

    out_dir: Path
    samples: int
    seed: int = 0
    camera: Camera = field(default_factory=lambda: Camera().scaled_to_width(TRAIN_WIDTH_PX))
    episode_s: float = 14.0
    stride_s: float = 1.0
    bags: bool = False
    workers: int = 0
    min_int_digits: int = 1
    standing_starts: float = 0.0
    highway_events_only: bool = False
    command_rule: str = DEFAULT_COMMAND_RULE
    scene_kind: str | None = None
    first_sample_s: float = 1.0
    label_last_states: bool = False
    plan_frame: str = DEFAULT_PLAN_FRAME

    def __post_init__(self) -> None:
        check_plan_frame(self.plan_frame)
        if self.scene_kind not in (None, *SCENE_KINDS):
            raise InputError(f"scene kind must be one of {SCENE_KINDS}, got {self.scene_kind!r}")
        if self.highway_events_only and self.scene_kind not in (None, "highway"):
            raise InputError(f"highway events need highway drives, not {self.scene_kind!r} ones")

    @property
    def drive_kind(self) -> str | None:
        """The scene kind every drive has (None: drawn from each seed)."""
        return "highway" if self.highway_events_only else self.scene_kind

    @property
    def first_sample_tick(self) -> int:
        return round(self.first_sample_s * SIM_HZ)


def standing_start(config: GenerateConfig, episode: int) -> bool:
    """Whether ``episode`` starts at rest (a draw of its own seed, independent of the scene's draws)."""
    if config.standing_starts <= 0.0:
        return False
    draw = np.random.default_rng([episode_seed(config.seed, episode), 1]).random()
    return bool(draw < config.standing_starts)


def episode_seed(seed: int, episode: int) -> int:
    """The scene seed of episode ``episode`` of a run with base ``seed`` (distinct, within 31 bits)."""
    return (seed * 1_000_003 + episode) % (2**31 - 1)


def _episode(job: tuple[GenerateConfig, int]) -> list[dict]:
    """Simulate one episode (writing its bag when asked); return its samples: PNG bytes, records, truth."""
    config, episode = job
    scene = make_scene(episode_seed(config.seed, episode), config.drive_kind, config.highway_events_only)
    standing = standing_start(config, episode)
    if standing:
        scene.stand_still()
    log = record_drive(scene, config.episode_s)
    out = []
    first_tick = 0 if standing else config.first_sample_tick
    for index in sample_indices(log, round(config.stride_s * SIM_HZ), first_tick=first_tick):
        frame = render_front(config.camera, scene.lanes, log[index])
        truth = ground_truth(log, index, scene, frame, config.command_rule)
        out.append(sample(f"e{episode:06d}_t{index:04d}", frame.image_rgb, truth, scene.kind, config))
    if config.bags and out:
        from wamdiff2_ros.sim.bags import DriveTick, write_drive_bag

        told = (navigation(scene, s.ego.xy, config.command_rule) for s in log)
        ticks = (
            DriveTick(s, render_front(config.camera, scene.lanes, s).image_rgb, t.command, t.distance_m)
            for s, t in zip(log, told, strict=True)
        )
        bag = config.out_dir / "bags" / f"drive_{episode:06d}"
        write_drive_bag(bag, config.camera, ticks, route_map=scene.route_map)
    return out


def sample(sample_id: str, image_rgb, truth: GroundTruth, kind: str, config: GenerateConfig) -> dict:
    """One sample as ``generate`` writes it: PNG bytes, its records of the three tasks and its truth line."""
    image_path = f"images/{sample_id}.png"
    image_wh_px = (config.camera.intrinsics.width_px, config.camera.intrinsics.height_px)
    return {
        "image_path": image_path,
        "png": encode_png(image_rgb),  # written by the parent only if the sample is kept
        "planning": export.planning_record(
            sample_id, image_path, truth, config.min_int_digits, config.plan_frame
        ),
        "detection": export.detection_record(sample_id, image_path, truth, image_wh_px),
        "qa": export.qa_records(sample_id, image_path, truth),
        "truth": export.ground_truth_line(sample_id, image_path, truth) | {"kind": kind},
    }


def _episodes(config: GenerateConfig) -> Iterator[list[dict]]:
    """Episodes 0, 1, 2, ... in order, computed a batch at a time (the caller stops when it has enough)."""
    workers = config.workers or os.cpu_count() or 1
    batch = 4 * workers
    if workers == 1:
        for episode in itertools.count():
            yield _episode((config, episode))
    # Workers come from a fork server, not a fork of the caller: forked from a recipe process (torch's
    # threads started) they hung once (2026-12-03: five of fourteen exited, imap waited forever).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # the server imports the simulator once, its forks share it
    yield from ordered_results(context, workers, _episode, lambda episode: (config, episode), batch)


def generate(
    config: GenerateConfig, progress: bool = True, episodes: Iterator[list[dict]] | None = None
) -> dict:
    """Generate ``config.samples`` samples into ``config.out_dir``.

    Args:
        config: what to generate and where.
        progress: show a progress bar.
        episodes: where the samples come from, an episode's list at a time (``sample`` dicts); default:
            the expert's recorded drives of ``config``'s seeded scenes (``sim.dagger`` passes a policy's).

    Returns:
        A summary: sample and episode counts, scene kinds, commands.

    Raises:
        InputError: a non-positive sample count or an unknown command rule.
    """
    if config.samples <= 0:
        raise InputError(f"samples must be positive, got {config.samples}")
    if config.command_rule not in COMMAND_RULES:
        raise InputError(f"command rule must be one of {COMMAND_RULES}, got {config.command_rule!r}")
    from tqdm import tqdm

    (config.out_dir / "images").mkdir(parents=True, exist_ok=True)
    samples: list[dict] = []  # records only: images and truth lines go to disk as samples arrive
    kinds, commands = Counter(), Counter()
    episode_count = 0
    with (
        tqdm(total=config.samples, desc="samples", unit="sample", disable=not progress) as bar,
        (config.out_dir / "ground_truth.jsonl").open("w") as truth_file,
    ):
        for episode_samples in episodes if episodes is not None else _episodes(config):
            episode_count += 1
            taken = episode_samples[: config.samples - len(samples)]
            for taken_sample in taken:
                (config.out_dir / taken_sample["image_path"]).write_bytes(taken_sample.pop("png"))
                truth = taken_sample.pop("truth")
                truth_file.write(json.dumps(truth) + "\n")
                kinds[truth["kind"]] += 1
                commands[truth["command"]] += 1
            samples += taken
            bar.update(len(taken))
            if len(samples) >= config.samples:
                break
    _write_records(config, samples)
    _remove_unused_bags(config.out_dir, episode_count)
    return {
        "samples": len(samples),
        "episodes": episode_count,
        "kinds": dict(sorted(kinds.items())),
        "commands": dict(sorted(commands.items())),
    }


def _remove_unused_bags(out_dir: Path, episodes: int) -> None:
    """Workers run ahead of the samples needed: drop the bags of episodes that contributed none."""
    for bag in sorted((out_dir / "bags").glob("drive_*")):
        if int(bag.name.removeprefix("drive_")) >= episodes:
            shutil.rmtree(bag)


def load_camera(data_dir: Path) -> Camera:
    """The camera a dataset folder was rendered with (``camera.json``).

    Raises:
        FileNotFoundError: no ``camera.json`` in ``data_dir``.
    """
    data = json.loads((Path(data_dir) / "camera.json").read_text())
    return Camera(CameraIntrinsics(**data["intrinsics"]), CameraMount(**data["mount"]))


def load_command_rule(data_dir: Path) -> str:
    """The navigation command rule a dataset folder was made with (``navigation.json``; the legacy rule for
    a folder from before it was recorded)."""
    path = Path(data_dir) / NAVIGATION_FILE
    return json.loads(path.read_text())["command_rule"] if path.is_file() else LEGACY_COMMAND_RULE


def load_plan_frame(data_dir: Path) -> str:
    """The frame a dataset folder's planning answers are written in (``navigation.json``; ``ego`` for a
    folder from before it was recorded)."""
    path = Path(data_dir) / NAVIGATION_FILE
    if not path.is_file():
        return DEFAULT_PLAN_FRAME
    return json.loads(path.read_text()).get("plan_frame", DEFAULT_PLAN_FRAME)


def write_navigation(data_dir: Path, command_rule: str, plan_frame: str) -> None:
    """Record a folder's command rule and plan frame (``load_command_rule``, ``load_plan_frame``)."""
    navigation = {"command_rule": command_rule, "plan_frame": plan_frame}
    (Path(data_dir) / NAVIGATION_FILE).write_text(json.dumps(navigation) + "\n")


def _write_records(config: GenerateConfig, samples: list[dict]) -> None:
    out = config.out_dir
    for name in ("planning", "detection"):
        (out / f"{name}.json").write_text(json.dumps([s[name] for s in samples], indent=1))
    (out / "qa.json").write_text(json.dumps([r for s in samples for r in s["qa"]], indent=1))
    camera = {"intrinsics": asdict(config.camera.intrinsics), "mount": asdict(config.camera.mount)}
    (out / "camera.json").write_text(json.dumps(camera, indent=1))
    write_navigation(out, config.command_rule, config.plan_frame)
