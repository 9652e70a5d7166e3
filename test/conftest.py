"""Shared fixtures: the tiny random-weight preset with the real Qwen tokenizer, built once per session.

No ROS imports here: model and decoding tests run where ROS is absent.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: tests never reach the hub

import numpy as np
import pytest
import torch

# The tiny model's ops are too small to gain from intra-op threads, and the 2 cores are shared: with 2
# threads a busy neighbour makes every op wait at thread barriers (a decode took 0.33 s on 1 thread, 1.5-5.9 s
# on 2).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    from wamdiff2_ros.model.tokenizer import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny_model():
    from wamdiff2_ros.model.backbone import build_model

    return build_model("tiny", seed=0)


@pytest.fixture(scope="session")
def front_image() -> np.ndarray:
    """A seeded random 96x128 RGB frame: 20 visual tokens after the resize to the 12,544-pixel minimum."""
    return np.random.default_rng(0).integers(0, 256, size=(96, 128, 3), dtype=np.uint8)


@pytest.fixture(scope="session")
def planning_prompt(tokenizer, front_image):
    from wamdiff2_ros.model.prompt import build_planning_prompt

    return build_planning_prompt(tokenizer, front_image, "right", (4.66, -0.09), (0.17, -1.53))


@pytest.fixture(scope="session")
def kept_ids(tokenizer) -> list[int]:
    """The ids a reduced vocabulary keeps for the planning prompt's text (``model/vocab.py``)."""
    from wamdiff2_ros.model.prompt import chat_prompt_text, planning_user_text
    from wamdiff2_ros.model.vocab import ids_for

    return ids_for(
        tokenizer, [chat_prompt_text(planning_user_text("right", (4.66, -0.09), (0.17, -1.53)), 1)]
    )


@pytest.fixture(scope="session")
def grammar(tokenizer):
    from wamdiff2_ros.decoding.grammar import PlanningGrammar
    from wamdiff2_ros.model.tokenizer import EOS_ID

    return PlanningGrammar(tokenizer, EOS_ID, max_step_m=20.0)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
