"""The bundled default model (models/default, docs: its MODEL_CARD.md): where it lives and how to load it.

It is found in the source checkout the package runs from (``models/default``: an editable install sees
the repository's current files, not a copy staged at install time), else in the install prefix
(``share/wamdiff2_ros/models/default``, where a wheel and colcon put it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from wamdiff2_ros.errors import CheckpointError

PACKAGE = "wamdiff2_ros"
DEFAULT_MODEL = Path("models") / "default"


def default_model_dir() -> Path:
    """The bundled default model's checkpoint folder.

    Raises:
        CheckpointError: neither the install nor the source tree has it.
    """
    candidates = (
        Path(__file__).resolve().parents[2] / DEFAULT_MODEL,
        Path(sys.prefix) / "share" / PACKAGE / DEFAULT_MODEL,
    )
    for folder in candidates:
        if (folder / "config.json").is_file():
            return folder
    raise CheckpointError(
        f"no bundled default model (looked in {', '.join(map(str, candidates))}); give a checkpoint folder "
        "or a random-weight preset"
    )
