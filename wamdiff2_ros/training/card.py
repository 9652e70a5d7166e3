"""A recipe's ``bundle`` step: a packed checkpoint installed as a model folder, its card's tables written from
the recipe's own evaluations.

The card's prose is written by people; the part between ``BEGIN`` and ``END`` is the recipe's and is
rewritten each time the step runs (the markers are appended to a card that has none). The folder keeps its
card and the tokenizer files; its other files are replaced by the pack's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from wamdiff2_ros.eval.closed_loop import FAILURE_MODES
from wamdiff2_ros.eval.open_loop import load_predictions
from wamdiff2_ros.eval.paired import driving_scores, paired_difference, paired_ratio, sample_ade
from wamdiff2_ros.sim.scenes import SCENE_KINDS

BEGIN = "<!-- recipe tables: begin (written by `wamdiff2 train recipe`; edit the recipe, not this part) -->"
END = "<!-- recipe tables: end -->"
KEPT = ("MODEL_CARD.md", "tokenizer.json", "tokenizer_config.json")  # the folder's own, never a pack's
BASELINES = ("expert", "constant-velocity")
FAILURES = tuple(mode for mode in FAILURE_MODES if mode != "completed")
HEADERS = {  # the failure columns' names, short enough for a table
    "collision_same_direction": "same-dir",
    "collision_crossing": "crossing",
    "collision_oncoming": "oncoming",
    "route_deviation": "departure",
}


def install(pack: Path, to: Path) -> list[str]:
    """Make ``to`` (made if missing) hold the files of checkpoint folder ``pack`` and its own ``KEPT`` ones:
    its other files go (an older model's lineage files must not describe this one). Returns the names
    copied."""
    to.mkdir(parents=True, exist_ok=True)
    for path in (p for p in to.iterdir() if p.is_file() and p.name not in KEPT):
        path.unlink()
    copied = []
    for path in sorted(p for p in pack.iterdir() if p.is_file() and p.name not in KEPT):
        shutil.copyfile(path, to / path.name)
        copied.append(path.name)
    for name in KEPT[1:]:  # a new folder still gets a tokenizer
        if not (to / name).exists() and (pack / name).exists():
            shutil.copyfile(pack / name, to / name)
    return copied


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _forwards(metrics: dict[str, Any]) -> float | None:
    """Forwards per planning answer of an evaluation (``metrics.json``'s ``cost``; older ones have none)."""
    return metrics.get("cost", {}).get("planning", {}).get("forwards_per_answer")


def against_reference(evaluations: dict[str, Path], reference: tuple[str, Path]) -> list[str]:
    """One line per evaluation of the reference's data: its ADE as a ratio of the reference's over the
    samples both answered, with the 90 % paired interval, and the forwards each takes per answer. Paths are
    ``metrics.json`` files, the answers (``planning.json``) beside them."""
    name, path = reference
    metrics = json.loads(path.read_text())
    data, theirs = Path(metrics["data"]), path.parent / "planning.json"
    lines = []
    for other, other_path in evaluations.items():
        mine_metrics = json.loads(other_path.read_text())
        if other == name or not _same_samples(Path(mine_metrics["data"]), data):
            continue  # itself, or other samples: no pair
        mine = other_path.parent / "planning.json"
        ids = sorted(set(load_predictions(mine)) & set(load_predictions(theirs)))
        paired = paired_ratio(sample_ade(data, mine, ids), sample_ade(data, theirs, ids))
        line = (
            f"- {other} against {name} ({paired['samples']} samples): ADE {paired['ade_m']:.3f} / "
            f"{paired['reference_ade_m']:.3f} m = {paired['ratio']:.3f}x (90 % {paired['low']:.3f} .. "
            f"{paired['high']:.3f})"
        )
        mine_forwards, their_forwards = _forwards(mine_metrics), _forwards(metrics)
        if mine_forwards and their_forwards:
            line += (
                f", {mine_forwards:.1f} against {their_forwards:.1f} forwards a plan "
                f"({their_forwards / mine_forwards:.1f}x fewer)"
            )
        lines.append(line)
    return lines


def _same_samples(one: Path, other: Path) -> bool:
    """Whether two data folders hold the same samples: the same folder, or a copy made from the same seed
    elsewhere (an evaluation run in a scratch folder), whose ground truth is byte for byte the same."""
    if one == other:
        return True
    truths = (one / "ground_truth.jsonl", other / "ground_truth.jsonl")
    return all(t.exists() for t in truths) and truths[0].read_bytes() == truths[1].read_bytes()


def open_loop_table(evaluations: dict[str, dict[str, Any]]) -> str:
    """Markdown: each evaluation's model (named by its step) and the first one's baselines, with the
    planning metrics; then each model's detection AP by distance band. ``evaluations``: step name ->
    ``metrics.json``."""
    lines = [
        "| planner | samples | ADE m | FDE m | collision rate | comfort | PDMS | forwards / plan "
        "| detection mAP | AP50 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    first = next(iter(evaluations.values()))
    rows = [
        (name, metrics["planners"]["model"], metrics.get("detection"), _forwards(metrics))
        for name, metrics in evaluations.items()
    ]
    rows += [(name, first["planners"][name], None, None) for name in BASELINES if name in first["planners"]]
    for name, planner, detection, forwards in rows:
        detection = detection or {}
        lines.append(
            f"| {name} | {planner['samples']} | {_number(planner['ade_m'])} | {_number(planner['fde_m'])} | "
            f"{_number(planner['collision_rate'])} | {_number(planner['comfort'])} | "
            f"{_number(planner['pdm_score'])} | {_number(forwards, 1)} | {_number(detection.get('map'))} | "
            f"{_number(detection.get('ap50'))} |"
        )
    bands = [
        band
        for metrics in evaluations.values()
        for band in metrics.get("detection", {}).get("by_distance", {})
    ]
    bands = list(dict.fromkeys(bands))
    if bands:
        lines += [
            "",
            "| detection mAP by distance | " + " | ".join(bands) + " |",
            "| --- |" + " --- |" * len(bands),
        ]
        for name, metrics in evaluations.items():
            by_band = metrics.get("detection", {}).get("by_distance", {})
            cells = [_number(by_band.get(band, {}).get("map")) for band in bands]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _policy_row(label: str, policy: dict[str, Any]) -> str:
    episodes = policy["episodes"]
    by_kind = []
    for kind in SCENE_KINDS:
        scores = [e["driving_score"] for e in episodes if e.get("kind") == kind]
        by_kind.append(_number(sum(scores) / len(scores)) if scores else "-")
    modes = policy["summary"].get("failure_modes", {})
    counts = [str(modes.get(mode, 0)) for mode in FAILURES]
    return (
        f"| {label} | {len(episodes)} | {_number(policy['summary']['driving_score'])} | "
        + " | ".join(by_kind)
        + f" | {modes.get('completed', 0)} | "
        + " | ".join(counts)
        + " |"
    )


def closed_loop_table(reports: dict[str, dict[str, Any]]) -> str:
    """Markdown: every model policy of each report (named by step and policy) and the baselines (each from
    the first report that drove it), with the driving score overall and by scene kind and each failure
    mode's count; then each model policy's paired difference to constant velocity over the same episodes,
    with its 90 % interval. ``reports``: step name -> ``report.json``."""
    failures = [HEADERS.get(mode, mode) for mode in FAILURES]
    header = ["policy", "episodes", "driving score", *SCENE_KINDS, "completed", *failures]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    models = [
        (f"{step}: {name}", policy)
        for step, report in reports.items()
        for name, policy in report["policies"].items()
        if name not in BASELINES
    ]
    every = [report["policies"] for report in reports.values()]
    baselines = {
        name: next(p[name] for p in every if name in p) for name in BASELINES if any(name in p for p in every)
    }
    lines += [_policy_row(label, policy) for label, policy in models + list(baselines.items())]
    if "constant-velocity" in baselines:
        reference = driving_scores({int(e["seed"]): e for e in baselines["constant-velocity"]["episodes"]})
        lines.append("")
        for label, policy in models:
            scores = driving_scores({int(e["seed"]): e for e in policy["episodes"]})
            if set(scores) != set(reference):
                continue  # other episodes: no pair
            paired = paired_difference(scores, reference)
            lines.append(
                f"- {label} against constant velocity, paired over {paired['episodes']} episodes: "
                f"{paired['difference']:+.3f} (90 % {paired['low']:+.3f} .. {paired['high']:+.3f})"
            )
    return "\n".join(lines)


def card_tables(
    command: str,
    evaluations: dict[str, dict[str, Any]],
    reports: dict[str, dict[str, Any]],
    weights: Path,
    paired: list[str] | None = None,
) -> str:
    """The card's recipe part: how it was made, the weights' size, then the open-loop table with the
    ``paired`` lines under it (``against_reference``), then the closed-loop table."""
    parts = [
        BEGIN,
        "",
        f"Made by `{command}`; weights `{weights.name}`, {weights.stat().st_size / 1e6:.1f} MB.",
    ]
    if evaluations:
        parts += [
            "",
            "Open loop (held-out samples, greedy answers, planning grammar on):",
            "",
            open_loop_table(evaluations),
            *(["", *paired] if paired else []),
        ]
    if reports:
        parts += ["", "Closed loop (seeded episodes in the simulator):", "", closed_loop_table(reports)]
    return "\n".join([*parts, "", END])


def write_tables(card: Path, tables: str) -> None:
    """Put ``tables`` (from ``BEGIN`` to ``END``) in place of the card's recipe part, or at its end."""
    text = card.read_text() if card.exists() else f"# {card.parent.name}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + tables + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + tables + "\n"
    card.write_text(text)


def bundle(
    pack: Path,
    to: Path,
    command: str,
    evaluations: dict[str, Path],
    reports: dict[str, Path],
    reference: tuple[str, Path] | None = None,
) -> Path:
    """Install ``pack`` into ``to`` and write its card's tables from the evaluations' ``metrics.json`` and the
    closed loops' ``report.json`` (by step name), each evaluation's ADE paired with ``reference``'s (a step
    name and its ``metrics.json``) when given; returns ``to``."""
    install(pack, to)
    tables = card_tables(
        command,
        {name: json.loads(path.read_text()) for name, path in evaluations.items()},
        {name: json.loads(path.read_text()) for name, path in reports.items()},
        to / "model.safetensors",
        against_reference(evaluations, reference) if reference is not None else None,
    )
    write_tables(to / "MODEL_CARD.md", tables)
    return to
