"""The planner's allocator setting: a frame-sized buffer comes from the heap, not a fresh memory map."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# In a child process: mallopt changes the whole process's allocator, and the test runner's must stay as it is.
PROBE = textwrap.dedent(
    """
    import ctypes
    from wamdiff2_ros.nodes.allocator import keep_frame_buffers_in_heap

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def maps_for_one_frame():
        before = libc.mallinfo2().hblks
        frame = bytearray(1920 * 1080 * 3)
        during = libc.mallinfo2().hblks
        del frame
        return during - before

    default = maps_for_one_frame()
    applied = keep_frame_buffers_in_heap()
    print(default, int(applied), maps_for_one_frame(), maps_for_one_frame())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_1080p_frame_buffer_is_mapped_afresh_by_default_and_comes_from_the_heap_once_set() -> None:
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError as error:
        if "mallinfo2" in error.stderr:
            pytest.skip("the C library has no mallinfo2 (glibc < 2.33)")
        raise
    default, applied, first, second = (int(value) for value in out.split())
    assert (default, applied) == (1, 1)
    assert (first, second) == (0, 0)
