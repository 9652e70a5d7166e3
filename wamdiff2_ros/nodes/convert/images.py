"""sensor_msgs Image / CompressedImage <-> numpy arrays, without cv_bridge.

PyPI's ``cv-bridge`` is a broken ROS 1 copy (docs/REFERENCE.md §9.1), so this is a small
numpy converter: it honours ``step`` row padding and ``is_bigendian``, returns arrays in native byte order,
and rejects anything unsupported or inconsistent with an ``ImageConversionError`` that names the problem.
JPEG/PNG decoding and encoding of CompressedImage go through OpenCV. Colour conversion for the model is
``camera_rgb8`` (one pass from the message) or ``to_rgb8`` (from an array); nothing here resizes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from wamdiff2_ros.errors import ImageConversionError


@dataclass(frozen=True)
class Encoding:
    dtype: np.dtype  # element type in native byte order
    channels: int


ENCODINGS: dict[str, Encoding] = {
    "bgr8": Encoding(np.dtype(np.uint8), 3),
    "rgb8": Encoding(np.dtype(np.uint8), 3),
    "bgra8": Encoding(np.dtype(np.uint8), 4),
    "rgba8": Encoding(np.dtype(np.uint8), 4),
    "mono8": Encoding(np.dtype(np.uint8), 1),
    "8UC1": Encoding(np.dtype(np.uint8), 1),
    "8UC3": Encoding(np.dtype(np.uint8), 3),
    "mono16": Encoding(np.dtype(np.uint16), 1),
    "16UC1": Encoding(np.dtype(np.uint16), 1),
}
# Encodings that carry colour in a known channel order: to_rgb8 accepts these.
# 8UC3 is left out on purpose: it names no channel order, and guessing BGR would be silently wrong.
_RGB_INDEX = {"rgb8": [0, 1, 2], "rgba8": [0, 1, 2], "bgr8": [2, 1, 0], "bgra8": [2, 1, 0]}
_NATIVE_BIG_ENDIAN = sys.byteorder == "big"


def _encoding(name: str) -> Encoding:
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ImageConversionError(
            f"unsupported image encoding {name!r}; supported: {', '.join(ENCODINGS)}"
        ) from None


@dataclass(frozen=True)
class ImageLayout:
    """A checked ``sensor_msgs/Image`` layout: what is needed to read its pixels."""

    encoding: Encoding
    height: int
    width: int
    step: int

    @property
    def row_bytes(self) -> int:
        return self.width * self.encoding.channels * self.encoding.dtype.itemsize


def image_layout(msg: Image) -> ImageLayout:
    """Check an image's fields without touching its pixels (cheap: a camera callback can afford it).

    Raises:
        ImageConversionError: unsupported encoding, empty image, ``step`` shorter than a row,
            ``data`` size different from ``step * height``, or an invalid ``is_bigendian``.
    """
    encoding = _encoding(msg.encoding)
    layout = ImageLayout(encoding, int(msg.height), int(msg.width), int(msg.step))
    height, width, step = layout.height, layout.width, layout.step
    if height == 0 or width == 0:
        raise ImageConversionError(f"empty image: {width}x{height} ({msg.encoding})")
    if step < layout.row_bytes:
        raise ImageConversionError(
            f"step {step} is shorter than one {msg.encoding} row of width {width} ({layout.row_bytes} bytes)"
        )
    if step % encoding.dtype.itemsize:
        raise ImageConversionError(f"step {step} is not a multiple of the {msg.encoding} element size")
    if len(msg.data) != step * height:
        raise ImageConversionError(
            f"data has {len(msg.data)} bytes but step * height = {step} * {height} = {step * height}"
        )
    if msg.is_bigendian not in (0, 1):
        raise ImageConversionError(f"is_bigendian must be 0 or 1, got {msg.is_bigendian}")
    return layout


def _rows(msg: Image, layout: ImageLayout) -> np.ndarray:
    # (H, row bytes) view of the message's buffer, row padding skipped: no copy.
    return np.frombuffer(msg.data, dtype=np.uint8).reshape(layout.height, layout.step)[:, : layout.row_bytes]


def image_to_numpy(msg: Image) -> np.ndarray:
    """Pixels of a ``sensor_msgs/Image`` as an (H, W) or (H, W, C) array in native byte order.

    The array is a fresh copy (safe to keep after the message is gone); channel order is the
    message's encoding (a bgr8 image stays BGR).

    Raises:
        ImageConversionError: as ``image_layout``.
    """
    layout = image_layout(msg)
    encoding = layout.encoding
    stored = encoding.dtype.newbyteorder(">" if msg.is_bigendian else "<")
    # astype copies into native order: the result owns its memory and outlives the message.
    pixels = np.ascontiguousarray(_rows(msg, layout)).view(stored).astype(encoding.dtype)
    shape = (layout.height, layout.width)
    return pixels.reshape(shape if encoding.channels == 1 else (*shape, encoding.channels))


def camera_layout(msg: Image) -> ImageLayout:
    """``image_layout`` of a frame the model can use (``to_rgb8``'s encodings).

    Raises:
        ImageConversionError: as ``image_layout``, or an encoding with no colour image (e.g. 16UC1).
    """
    layout = image_layout(msg)
    if msg.encoding not in _RGB_INDEX and msg.encoding not in ("mono8", "8UC1"):
        raise ImageConversionError(
            f"cannot use a {msg.encoding} image as a camera frame (colour or mono8 needed)"
        )
    return layout


def camera_rgb8(msg: Image) -> np.ndarray:
    """The (H, W, 3) uint8 RGB frame of a camera image in one pass over its pixels (OpenCV reads the row
    padding in place): ``to_rgb8(image_to_numpy(msg), msg.encoding)`` at a fraction of its cost.

    Raises:
        ImageConversionError: as ``camera_layout``.
    """
    import cv2

    layout = camera_layout(msg)
    channels = layout.encoding.channels
    pixels = _rows(msg, layout).reshape(layout.height, layout.width, channels)
    if msg.encoding in ("rgb8", "rgba8"):
        return np.ascontiguousarray(pixels[:, :, :3])
    code = {1: cv2.COLOR_GRAY2RGB, 3: cv2.COLOR_BGR2RGB, 4: cv2.COLOR_BGRA2RGB}[channels]
    return cv2.cvtColor(pixels, code)


def numpy_to_image(array: np.ndarray, encoding: str, header: Header | None = None) -> Image:
    """A ``sensor_msgs/Image`` holding ``array`` (native byte order, no row padding).

    Args:
        array: (H, W) or (H, W, 1) for single-channel encodings, (H, W, C) otherwise.
        encoding: one of ``ENCODINGS``; the array's dtype and channel count must match it.
        header: copied into the message (default: an empty header).

    Raises:
        ImageConversionError: unsupported encoding, wrong dtype, shape or channel count, empty array.
    """
    spec = _encoding(encoding)
    array = np.asarray(array)
    if array.dtype != spec.dtype:
        raise ImageConversionError(f"{encoding} needs dtype {spec.dtype}, got {array.dtype}")
    if array.ndim == 3 and spec.channels == 1 and array.shape[2] == 1:
        array = array[:, :, 0]
    expected_ndim = 2 if spec.channels == 1 else 3
    if array.ndim != expected_ndim or (expected_ndim == 3 and array.shape[2] != spec.channels):
        wanted = "(H, W)" if spec.channels == 1 else f"(H, W, {spec.channels})"
        raise ImageConversionError(f"{encoding} needs shape {wanted}, got {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageConversionError(f"empty image: shape {array.shape}")
    msg = Image()
    if header is not None:
        msg.header = header
    msg.height, msg.width = int(array.shape[0]), int(array.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = int(_NATIVE_BIG_ENDIAN)
    msg.step = msg.width * spec.channels * spec.dtype.itemsize
    msg.data = array.tobytes()  # bytes, never an ndarray: assigning an ndarray costs ~260 ms at 1080p
    return msg


def to_rgb8(array: np.ndarray, encoding: str) -> np.ndarray:
    """An (H, W, 3) uint8 RGB view of a colour or mono8 image, as the model takes it.

    Raises:
        ImageConversionError: the encoding carries no colour image the model can use (e.g. 16UC1 depth).
    """
    if encoding in _RGB_INDEX:
        return np.ascontiguousarray(array[:, :, _RGB_INDEX[encoding]])
    if encoding in ("mono8", "8UC1"):
        return np.repeat(array[:, :, None], 3, axis=2)
    raise ImageConversionError(f"cannot use a {encoding} image as a camera frame (colour or mono8 needed)")


def compressed_to_numpy(msg: CompressedImage) -> tuple[np.ndarray, str]:
    """Decode a JPEG or PNG ``sensor_msgs/CompressedImage``.

    Returns:
        The pixels and their encoding: ``bgr8`` for colour, ``mono8`` for grayscale.

    Raises:
        ImageConversionError: empty data, or data OpenCV cannot decode (the format field is reported).
    """
    import cv2

    if len(msg.data) == 0:
        raise ImageConversionError(f"compressed image ({msg.format!r}) has no data")
    decoded = cv2.imdecode(np.frombuffer(msg.data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if decoded is None:
        raise ImageConversionError(
            f"cannot decode compressed image: format {msg.format!r}, {len(msg.data)} bytes"
        )
    if decoded.dtype != np.uint8:
        raise ImageConversionError(f"compressed image decodes to {decoded.dtype}; only 8-bit images are used")
    if decoded.ndim == 2:
        return decoded, "mono8"
    if decoded.shape[2] == 4:
        return np.ascontiguousarray(decoded[:, :, :3]), "bgr8"
    return decoded, "bgr8"


def numpy_to_compressed(
    array: np.ndarray,
    encoding: str,
    image_format: str = "jpeg",
    quality: int = 90,
    header: Header | None = None,
) -> CompressedImage:
    """Encode an 8-bit colour (bgr8/rgb8) or mono8 image as a JPEG or PNG ``CompressedImage``.

    Raises:
        ImageConversionError: unsupported format or encoding, or an encoder failure.
    """
    import cv2

    extension = {"jpeg": ".jpg", "jpg": ".jpg", "png": ".png"}.get(image_format)
    if extension is None:
        raise ImageConversionError(f"unsupported compressed format {image_format!r}; use jpeg or png")
    if encoding in ("mono8", "8UC1"):
        pixels = np.asarray(array)
    elif encoding in _RGB_INDEX:
        pixels = to_rgb8(np.asarray(array), encoding)[:, :, ::-1]  # OpenCV encodes BGR
    else:
        raise ImageConversionError(f"cannot compress a {encoding} image (8-bit colour or mono8 needed)")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if extension == ".jpg" else []
    ok, buffer = cv2.imencode(extension, np.ascontiguousarray(pixels), params)
    if not ok:
        raise ImageConversionError(f"OpenCV could not encode a {pixels.shape} image as {image_format}")
    msg = CompressedImage()
    if header is not None:
        msg.header = header
    # ROS convention for the format field: "<orig encoding>; <compression> compressed <pixel format>".
    msg.format = f"{encoding}; {'jpeg' if extension == '.jpg' else 'png'} compressed bgr8"
    msg.data = buffer.tobytes()
    return msg
