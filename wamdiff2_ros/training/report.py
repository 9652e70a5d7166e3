"""Training metrics as JSON lines and the loss curve as a PNG; nothing here trains or evaluates."""

from __future__ import annotations

import json
import math
from pathlib import Path


def append_metrics(path: Path, row: dict) -> None:
    """Append one JSON line (NaN written as null so that every line is strict JSON)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    with path.open("a") as stream:
        stream.write(json.dumps(clean) + "\n")


def read_metrics(path: Path) -> list[dict]:
    """All rows of a metrics file; a step logged twice (a resumed run) keeps its last row."""
    rows: dict[tuple, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[(row.get("phase"), row.get("step"), row.get("kind", "train"))] = row
    return list(rows.values())


def plot_loss(metrics_path: Path, png_path: Path) -> Path:
    """Draw the training loss per optimizer step, one line per phase (block size), and the held-out loss
    (``kind: heldout`` rows) as dashed points, to ``png_path``.

    Returns:
        ``png_path``.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    every = [r for r in read_metrics(metrics_path) if r.get("loss") is not None]
    rows = [r for r in every if r.get("kind", "train") == "train"]
    heldout = [r for r in every if r.get("kind") == "heldout"]
    figure, axis = plt.subplots(figsize=(7, 4))
    for phase in sorted({r["phase"] for r in rows}):
        points = sorted((r["step"], r["loss"]) for r in rows if r["phase"] == phase)
        axis.plot([p[0] for p in points], [p[1] for p in points], label=phase)
        points = sorted((r["step"], r["loss"]) for r in heldout if r["phase"] == phase)
        if points:
            axis.plot([p[0] for p in points], [p[1] for p in points], "o--", label=f"{phase} held out")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("loss")
    axis.set_yscale("log")
    axis.grid(True, alpha=0.3)
    if rows:
        axis.legend(title="phase")
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
    return png_path
