"""The simulator under ``sim/``: highway-env behind an import guard, and the tick rate every scene steps at.

Nothing else lives here, so the driver models and the scenes can both import it without importing each
other.
"""

from __future__ import annotations

import os

SIM_HZ = 10
SIM_DT_S = 1.0 / SIM_HZ


def import_highway_env():
    """Import highway-env lazily (an optional heavy dependency) and keep pygame off any display."""
    # 'offscreen', not 'dummy': highway-env 1.12.1 disables its viewer under 'dummy' (docs/REFERENCE.md §8).
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    try:
        import highway_env
    except ImportError as exc:
        raise ImportError(
            "the driving simulator needs highway-env: pip install -r requirements/base.txt"
        ) from exc
    return highway_env
