"""How far the plans bend where the expert's bend: the lateral end of each answer file's plans on the samples
whose expert plan ends ``MIN_LATERAL_M`` or more to a side, signed towards the expert's side, by command and
side (the ring of a roundabout is told ``straight`` and bends left; a right turn is told ``right``).

Usage: python3 tools/probes/turn_lateral.py DATA_DIR ANSWERS.json [ANSWERS.json ...]
(DATA_DIR a ``sim generate`` folder; ANSWERS an evaluate step's or ``eval predict``'s planning answers)
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from wamdiff2_ros.eval.open_loop import load_predictions, load_truth

MIN_LATERAL_M = 3.0


def _means(pairs: np.ndarray) -> str:
    return f"{len(pairs)} samples, plan {pairs[:, 0].mean():.2f} m, expert {pairs[:, 1].mean():.2f} m"


def main() -> None:
    truth = load_truth(sys.argv[1])
    for path in sys.argv[2:]:
        planned = load_predictions(path)
        groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        for sample, true in truth.items():
            end = float(true.waypoints_ego[-1, 1])
            if abs(end) < MIN_LATERAL_M or sample not in planned:
                continue
            side = np.sign(end)
            key = (true.command, "left" if side > 0 else "right")
            groups[key].append((side * planned[sample][-1, 1], side * end))
        pairs = np.array([pair for group in groups.values() for pair in group])
        print(f"{path}: {_means(pairs)}")
        for (command, side), group in sorted(groups.items()):
            print(f"  told {command}, bending {side}: {_means(np.array(group))}")


if __name__ == "__main__":
    main()
