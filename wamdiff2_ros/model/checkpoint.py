"""Load and save a checkpoint: a local Hugging Face style folder (config.json, *.safetensors, tokenizer).

Safetensors only: pickle formats (*.bin, *.pt) are refused and nothing from the folder is executed. A folder
written by ``save_checkpoint`` also carries ``wamdiff2_manifest.json`` with the SHA-256 of every weight
file, so that a tampered file is reported, not silently loaded; folders from elsewhere (a released
WAM-Diff2 checkpoint) have no manifest and are checked for structure only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerBase, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from wamdiff2_ros.errors import CheckpointError
from wamdiff2_ros.model.backbone import build_model, parse_dtype
from wamdiff2_ros.model.tokenizer import load_tokenizer
from wamdiff2_ros.model.vocab import install, read_kept, write_kept

MANIFEST = "wamdiff2_manifest.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Image resize budget the model was trained with, in the Qwen2-VL processor's keys.
PREPROCESSOR = "preprocessor_config.json"
PROCESSOR = "processor_config.json"
# model_type of the reference's renamed copy of Qwen3-VL (reference modeling_wam_diff2.py); same fields.
ACCEPTED_MODEL_TYPES = ("qwen3_vl", "wam_diff2")


@dataclass
class LoadedModel:
    """A model with its tokenizer and where it came from."""

    model: Qwen3VLForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    source: str
    max_pixels: int | None = None  # the image budget it was trained at (preprocessor_config.json), if known


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_checkpoint(
    model: Qwen3VLForConditionalGeneration,
    folder: str | Path,
    tokenizer: PreTrainedTokenizerBase | None = None,
    pixels: tuple[int, int] | None = None,
) -> Path:
    """Write ``config.json``, ``model.safetensors``, the manifest and (if given) the tokenizer files.

    Args:
        model: the model to save, any dtype and device; tensors are written as they are (bit exact).
        folder: destination; created if missing. Existing files of the same names are replaced.
        tokenizer: written with ``save_pretrained`` when given.
        pixels: (min_pixels, max_pixels) of the image resize it was trained with, written to
            ``preprocessor_config.json`` so that inference resizes images the same way.

    Returns:
        The folder path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(str(folder / "config.json"))
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        # The head is the embedding matrix; safetensors refuses shared storage, and loading re-ties it.
        state.pop("lm_head.weight", None)
    tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in state.items()}
    save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
    manifest = {"format": "wamdiff2-checkpoint-1", "sha256": {WEIGHTS: _sha256(folder / WEIGHTS)}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    write_kept(model, folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    if pixels is not None:
        budget = {"min_pixels": pixels[0], "max_pixels": pixels[1]}
        (folder / PREPROCESSOR).write_text(json.dumps(budget, indent=2) + "\n")
    return folder


def _budget_of(settings: dict) -> tuple[object, object] | None:
    """(min, max) pixels of an image processor's settings in either form transformers has written:
    ``min_pixels`` / ``max_pixels`` (Qwen2-VL, and this project's files) or ``size`` with ``shortest_edge`` /
    ``longest_edge`` (Qwen3-VL's published checkpoints; the edges are areas in pixels there)."""
    if "min_pixels" in settings or "max_pixels" in settings:
        return settings.get("min_pixels"), settings.get("max_pixels")
    size = settings.get("size")
    if isinstance(size, dict) and ("shortest_edge" in size or "longest_edge" in size):
        return size.get("shortest_edge"), size.get("longest_edge")
    return None


def read_command_rule(folder: str | Path) -> str:
    """The navigation command rule the folder's model was trained to read (``model.prompt.command_rule_of``
    of its ``config.json``)."""
    from types import SimpleNamespace

    from wamdiff2_ros.model.prompt import command_rule_of

    return command_rule_of(SimpleNamespace(**json.loads((Path(folder) / "config.json").read_text())))


def read_plan_frame(folder: str | Path) -> str:
    """The frame the folder's model writes its plans in (``model.plan_frame.plan_frame_of`` of its
    ``config.json``)."""
    from types import SimpleNamespace

    from wamdiff2_ros.model.plan_frame import plan_frame_of

    return plan_frame_of(SimpleNamespace(**json.loads((Path(folder) / "config.json").read_text())))


def read_pixel_budget(folder: str | Path) -> tuple[int, int] | None:
    """(min_pixels, max_pixels) of the folder's image processor; None when it states none.

    Read from ``preprocessor_config.json``, else from ``processor_config.json`` (where transformers 5 writes
    a processor's image settings under ``image_processor``), in either form of ``_budget_of``.

    Raises:
        CheckpointError: the file is unreadable, or its budget is not two integers 0 < min <= max.
    """
    for name, key in ((PREPROCESSOR, None), (PROCESSOR, "image_processor")):
        path = Path(folder) / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise CheckpointError(f"{path} is unreadable: {error}") from error
        settings = data.get(key, {}) if key else data
        budget = _budget_of(settings) if isinstance(settings, dict) else None
        if budget is None:
            continue
        try:
            low, high = int(budget[0]), int(budget[1])
        except (TypeError, ValueError) as error:
            raise CheckpointError(
                f"{path}: needs integer min_pixels and max_pixels (or size.shortest_edge and "
                f"size.longest_edge), got {budget[0]!r} and {budget[1]!r}"
            ) from error
        if not 0 < low <= high:
            raise CheckpointError(f"{path}: need 0 < min_pixels <= max_pixels, got {low}, {high}")
        return low, high
    return None


def read_config(folder: Path) -> Qwen3VLConfig:
    """The model config of a checkpoint folder.

    Raises:
        CheckpointError: missing, unreadable or not a Qwen3-VL / WAM-Diff2 config.
    """
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: a checkpoint folder needs config.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if data.get("model_type") not in ACCEPTED_MODEL_TYPES:
        raise CheckpointError(
            f"{path}: model_type {data.get('model_type')!r} is not one of {ACCEPTED_MODEL_TYPES}"
        )
    data["model_type"] = "qwen3_vl"
    try:
        return Qwen3VLConfig.from_dict(data)
    except (TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{path}: cannot build a Qwen3-VL config: {error}") from error


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder, from its index when there is one.

    Raises:
        CheckpointError: no safetensors files (pickle files are named as refused), or an index names a
            missing file.
    """
    index = folder / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, json.JSONDecodeError, KeyError) as error:
            raise CheckpointError(f"{index} is not a valid safetensors index: {error}") from error
        files = [folder / name for name in names]
        missing = [str(path) for path in files if not path.is_file()]
        if missing:
            raise CheckpointError(f"{index} names missing weight files: {missing}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = f" (found {pickled}: pickle formats are never loaded)" if pickled else ""
        raise CheckpointError(f"{folder} holds no *.safetensors weight file{hint}")
    return files


def _verify_manifest(folder: Path, files: list[Path]) -> None:
    path = folder / MANIFEST
    if not path.is_file():
        return
    try:
        expected = json.loads(path.read_text())["sha256"]
    except (OSError, json.JSONDecodeError, KeyError) as error:
        raise CheckpointError(f"{path} is unreadable: {error}") from error
    for file in files:
        if file.name not in expected:
            raise CheckpointError(f"{file} is not listed in {path}")
        if _sha256(file) != expected[file.name]:
            raise CheckpointError(f"{file} is tampered or corrupt: its SHA-256 differs from {path}")


def _legacy_name(name: str) -> str:
    # Older Qwen-VL exports put the language model at model.* and the vision tower at visual.*; transformers
    # >= 4.52 nests them as model.language_model.* and model.visual.*.
    if name.startswith("visual."):
        return "model." + name
    if name.startswith("model.") and not name.startswith(("model.language_model.", "model.visual.")):
        return "model.language_model." + name[len("model.") :]
    return name


def read_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    """All tensors of the given safetensors files, by (current transformers) parameter name.

    Raises:
        CheckpointError: a file is truncated or its header is corrupt, or two files hold the same tensor.
    """
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as reader:
                for name in reader.keys():  # noqa: SIM118 (safe_open is not a dict)
                    key = _legacy_name(name)
                    if key in tensors:
                        raise CheckpointError(f"{file}: tensor {name!r} also appears in another weight file")
                    tensors[key] = reader.get_tensor(name)
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{file} is truncated or corrupt: {error}") from error
    return tensors


def load_checkpoint(
    folder: str | Path,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> LoadedModel:
    """Load model and tokenizer from a checkpoint folder.

    Args:
        folder: the checkpoint folder.
        dtype: parameter dtype (``fp32``, ``bf16``, ``fp16``); ``None`` keeps the embedding's stored dtype.
        device: where the model goes.

    Returns:
        The model (eval mode, SDPA) and the folder's tokenizer, or the bundled Qwen tokenizer if it has none.

    Raises:
        CheckpointError: missing folder or files, corrupt or tampered weights, tensors that do not match the
            config (missing, unexpected or wrong shape).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    config = read_config(folder)
    files = weight_files(folder)
    _verify_manifest(folder, files)
    tensors = read_weights(files)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    embed = tensors.get("model.language_model.embed_tokens.weight")
    torch_dtype = (
        parse_dtype(dtype) if dtype is not None else (embed.dtype if embed is not None else torch.float32)
    )
    model = build_model(config, seed=None, dtype=torch_dtype, device=device, init_weights=False)
    expected = model.state_dict()
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{folder}: weights do not match config.json: {len(missing)} missing (e.g. {missing[:3]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:3]})"
        )
    wrong = [
        (n, tuple(t.shape), tuple(expected[n].shape))
        for n, t in tensors.items()
        if t.shape != expected[n].shape
    ]
    if wrong:
        raise CheckpointError(f"{folder}: tensor shapes (stored, config) differ: {wrong[:3]}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            expected[name].copy_(tensor)
    if config.tie_word_embeddings:
        model.tie_weights()
    kept = read_kept(folder)
    if kept is not None:
        install(model, kept)
    budget = read_pixel_budget(folder)
    return LoadedModel(
        model=model.eval(),
        tokenizer=load_tokenizer(folder),
        source=str(folder),
        max_pixels=None if budget is None else budget[1],
    )
