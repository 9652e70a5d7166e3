"""ADE of a planner relative to a reference planner on the same samples, with a paired bootstrap interval.

The model card's "B = 32 against its AR teacher" table:
    .venv/bin/python tools/paired_ade.py \
        --reference data/eval300=teacher300.json data/val200=teacher200.json \
        --planner data/eval300=default300.json data/val200=default200.json
Each ``DATA=FILE`` is a `wamdiff2 sim generate` folder and a predictions file for it (as `wamdiff2 eval
open-loop --predictions` takes); the sets are pooled. Prints the ratio of mean ADEs, its 90 % interval over
5,000 resamples of the samples (seed 0), and the ratio on each set alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from wamdiff2_ros.eval.open_loop import load_predictions, load_truth


def sample_ade(data_dir: Path, predictions: Path) -> np.ndarray:
    """Per-sample ADE (m) in the ground truth's sample order."""
    truth, planned = load_truth(data_dir), load_predictions(predictions)
    errors = [np.linalg.norm(planned[i] - truth[i].waypoints_ego, axis=1).mean() for i in sorted(truth)]
    return np.array(errors)


def pooled(pairs: list[str]) -> list[np.ndarray]:
    return [sample_ade(Path(data), Path(file)) for data, file in (pair.split("=", 1) for pair in pairs)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reference", nargs="+", required=True, metavar="DATA=FILE")
    parser.add_argument("--planner", nargs="+", required=True, metavar="DATA=FILE")
    args = parser.parse_args()
    reference, planner = pooled(args.reference), pooled(args.planner)
    ref, plan = np.concatenate(reference), np.concatenate(planner)
    resamples = np.random.default_rng(0).integers(0, len(ref), (5000, len(ref)))
    ratios = plan[resamples].mean(1) / ref[resamples].mean(1)
    low, high = np.quantile(ratios, [0.05, 0.95])
    print(f"samples {len(ref)}: ADE {plan.mean():.3f} vs reference {ref.mean():.3f} m")
    print(f"ratio {plan.mean() / ref.mean():.3f}, 90 % interval {low:.3f} - {high:.3f}")
    for pair, a, b in zip(args.planner, planner, reference, strict=True):
        print(f"  {pair.split('=')[0]}: ratio {a.mean() / b.mean():.3f} ({len(a)} samples)")


if __name__ == "__main__":
    main()
