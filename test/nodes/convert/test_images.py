"""Image conversion: round trips for every encoding, row padding and byte order; clear rejects."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from wamdiff2_ros.errors import ImageConversionError
from wamdiff2_ros.nodes.convert.images import (
    ENCODINGS,
    camera_layout,
    camera_rgb8,
    compressed_to_numpy,
    image_to_numpy,
    numpy_to_compressed,
    numpy_to_image,
    to_rgb8,
)


def random_image(encoding: str, height: int, width: int, seed: int = 0) -> np.ndarray:
    spec = ENCODINGS[encoding]
    shape = (height, width) if spec.channels == 1 else (height, width, spec.channels)
    info = np.iinfo(spec.dtype)
    return np.random.default_rng(seed).integers(
        info.min, info.max, size=shape, endpoint=True, dtype=spec.dtype
    )


def padded_message(array: np.ndarray, encoding: str, pad_bytes: int, big_endian: bool) -> Image:
    """Build a message the way a foreign driver might: padded rows, chosen byte order."""
    spec = ENCODINGS[encoding]
    stored = array.astype(spec.dtype.newbyteorder(">" if big_endian else "<"))
    rows = stored.reshape(array.shape[0], -1).view(np.uint8)
    padded = np.zeros((rows.shape[0], rows.shape[1] + pad_bytes), dtype=np.uint8)
    padded[:, : rows.shape[1]] = rows
    msg = Image(height=array.shape[0], width=array.shape[1], encoding=encoding, step=padded.shape[1])
    msg.is_bigendian = int(big_endian)
    msg.data = padded.tobytes()
    return msg


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_round_trip_through_cdr_is_exact(encoding: str) -> None:
    array = random_image(encoding, 7, 5)
    header = Header(frame_id="camera_optical")
    msg = deserialize_message(serialize_message(numpy_to_image(array, encoding, header)), Image)
    assert msg.header.frame_id == "camera_optical"
    np.testing.assert_array_equal(image_to_numpy(msg), array)


@pytest.mark.parametrize("pad_bytes", [0, 2, 6, 64], ids=lambda p: f"pad{p}")
@pytest.mark.parametrize("big_endian", [False, True], ids=["little", "big"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_padded_rows_and_byte_order_decode_exactly(encoding: str, pad_bytes: int, big_endian: bool) -> None:
    array = random_image(encoding, 6, 9, seed=pad_bytes)
    decoded = image_to_numpy(padded_message(array, encoding, pad_bytes, big_endian))
    assert decoded.dtype == ENCODINGS[encoding].dtype and decoded.dtype.isnative
    np.testing.assert_array_equal(decoded, array)


def test_decoded_array_is_independent_of_the_message() -> None:
    array = random_image("bgr8", 4, 4)
    msg = numpy_to_image(array, "bgr8")
    decoded = image_to_numpy(msg)
    decoded[:] = 0
    np.testing.assert_array_equal(image_to_numpy(msg), array)


def test_single_channel_accepts_trailing_channel_axis() -> None:
    array = random_image("16UC1", 3, 4)
    np.testing.assert_array_equal(image_to_numpy(numpy_to_image(array[:, :, None], "16UC1")), array)


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("rgb8", [10, 20, 30]),
        ("bgr8", [30, 20, 10]),
        ("rgba8", [10, 20, 30]),
        ("bgra8", [30, 20, 10]),
    ],
)
def test_to_rgb8_orders_channels(encoding: str, expected: list[int]) -> None:
    pixel = np.array([10, 20, 30, 255][: ENCODINGS[encoding].channels], dtype=np.uint8)
    rgb = to_rgb8(np.tile(pixel, (2, 3, 1)), encoding)
    assert rgb.shape == (2, 3, 3)
    np.testing.assert_array_equal(rgb[1, 2], expected)


def test_to_rgb8_replicates_mono() -> None:
    rgb = to_rgb8(np.full((2, 2), 7, dtype=np.uint8), "mono8")
    assert rgb.shape == (2, 2, 3) and np.all(rgb == 7)


def _message(**fields) -> Image:
    msg = Image(height=2, width=3, encoding="bgr8", step=9)
    msg.data = bytes(18)
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (_message(encoding="yuv422"), "unsupported image encoding 'yuv422'"),
        (_message(encoding=""), "unsupported image encoding ''"),
        (_message(height=0, data=b""), "empty image"),
        (_message(step=8), "step 8 is shorter than one bgr8 row"),
        (_message(data=bytes(17)), "data has 17 bytes but step \\* height"),
        (_message(data=bytes(19)), "data has 19 bytes"),
        (_message(is_bigendian=2), "is_bigendian must be 0 or 1"),
        (_message(encoding="16UC1", width=4, step=9), "not a multiple of the 16UC1 element size"),
    ],
    ids=[
        "unknown-encoding",
        "no-encoding",
        "empty",
        "short-step",
        "short-data",
        "long-data",
        "bad-endian",
        "odd-step",
    ],
)
def test_inconsistent_message_is_rejected_with_reason(msg: Image, match: str) -> None:
    with pytest.raises(ImageConversionError, match=match):
        image_to_numpy(msg)


@pytest.mark.parametrize(
    ("array", "encoding", "match"),
    [
        (np.zeros((2, 2, 3), np.uint16), "bgr8", "bgr8 needs dtype uint8"),
        (np.zeros((2, 2, 4), np.uint8), "bgr8", "bgr8 needs shape \\(H, W, 3\\)"),
        (np.zeros((2, 2, 3), np.uint8), "mono8", "mono8 needs shape \\(H, W\\)"),
        (np.zeros((0, 2, 3), np.uint8), "rgb8", "empty image"),
        (np.zeros((2, 2), np.float32), "32FC2", "unsupported image encoding"),
    ],
    ids=["dtype", "channels", "mono-with-colour", "empty", "encoding"],
)
def test_bad_array_is_rejected_with_reason(array: np.ndarray, encoding: str, match: str) -> None:
    with pytest.raises(ImageConversionError, match=match):
        numpy_to_image(array, encoding)


def test_depth_image_is_not_a_camera_frame() -> None:
    with pytest.raises(ImageConversionError, match="cannot use a 16UC1 image"):
        to_rgb8(np.zeros((2, 2), np.uint16), "16UC1")
    with pytest.raises(ImageConversionError, match="cannot use a 16UC1 image"):
        camera_layout(numpy_to_image(np.zeros((2, 2), np.uint16), "16UC1"))


CAMERA_ENCODINGS = ["bgr8", "rgb8", "bgra8", "rgba8", "mono8", "8UC1"]


@pytest.mark.parametrize("pad_bytes", [0, 3, 64], ids=lambda p: f"pad{p}")
@pytest.mark.parametrize("encoding", CAMERA_ENCODINGS)
def test_camera_rgb8_in_one_pass_equals_decode_then_to_rgb8(encoding: str, pad_bytes: int) -> None:
    msg = padded_message(random_image(encoding, 37, 53, seed=pad_bytes), encoding, pad_bytes, False)
    fast = camera_rgb8(msg)
    assert fast.flags.c_contiguous and fast.dtype == np.uint8 and fast.shape == (37, 53, 3)
    np.testing.assert_array_equal(fast, to_rgb8(image_to_numpy(msg), encoding))


def test_camera_layout_checks_fields_as_image_to_numpy_does() -> None:
    msg = numpy_to_image(np.zeros((4, 4, 3), np.uint8), "bgr8")
    msg.data = bytes(10)
    with pytest.raises(ImageConversionError, match="data has 10 bytes"):
        camera_layout(msg)


@pytest.mark.parametrize("encoding", ["bgr8", "rgb8", "mono8"])
def test_png_compressed_round_trip_is_lossless(encoding: str) -> None:
    array = random_image(encoding, 12, 10)
    decoded, decoded_encoding = compressed_to_numpy(numpy_to_compressed(array, encoding, "png"))
    expected = array if encoding == "mono8" else to_rgb8(array, encoding)[:, :, ::-1]
    assert decoded_encoding == ("mono8" if encoding == "mono8" else "bgr8")
    np.testing.assert_array_equal(decoded, expected)


def test_jpeg_compressed_round_trip_is_close() -> None:
    smooth = np.tile(np.linspace(0, 255, 64, dtype=np.uint8)[None, :, None], (48, 1, 3))
    msg = numpy_to_compressed(smooth, "bgr8", "jpeg", quality=95)
    assert msg.format == "bgr8; jpeg compressed bgr8"
    decoded, _ = compressed_to_numpy(msg)
    assert np.abs(decoded.astype(int) - smooth).max() <= 8


@pytest.mark.parametrize(
    ("data", "match"), [(b"", "has no data"), (b"not an image at all", "cannot decode compressed image")]
)
def test_undecodable_compressed_image_is_rejected(data: bytes, match: str) -> None:
    msg = CompressedImage(format="jpeg")
    msg.data = data
    with pytest.raises(ImageConversionError, match=match):
        compressed_to_numpy(msg)


@settings(max_examples=60, deadline=None)
@given(
    encoding=st.sampled_from(list(ENCODINGS)),
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    pad_elements=st.integers(0, 5),
    big_endian=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_valid_layout_decodes_to_the_original(
    encoding: str, height: int, width: int, pad_elements: int, big_endian: bool, seed: int
) -> None:
    array = random_image(encoding, height, width, seed)
    pad_bytes = pad_elements * ENCODINGS[encoding].dtype.itemsize
    np.testing.assert_array_equal(
        image_to_numpy(padded_message(array, encoding, pad_bytes, big_endian)), array
    )


@settings(max_examples=60, deadline=None)
@given(
    step=st.integers(0, 40), height=st.integers(0, 4), width=st.integers(0, 12), data_len=st.integers(0, 120)
)
def test_arbitrary_header_fields_never_crash_or_mislead(
    step: int, height: int, width: int, data_len: int
) -> None:
    msg = Image(height=height, width=width, encoding="rgb8", step=step)
    msg.data = bytes(data_len)
    try:
        decoded = image_to_numpy(msg)
    except ImageConversionError:
        return
    assert decoded.shape == (height, width, 3)
    assert step >= width * 3 and data_len == step * height
