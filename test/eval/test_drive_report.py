import numpy as np

from wamdiff2_ros.eval.drive_report import ReportFrame, sheet_frames


def _frames(count: int, detected_every: int) -> list[ReportFrame]:
    image = np.zeros((4, 4, 3), dtype=np.uint8)
    return [
        ReportFrame(0.1 * i, image, candidates_ego=[], selected=0, detected=i % detected_every == 0)
        for i in range(count)
    ]


def test_the_sheet_shows_frames_with_a_detection_answer() -> None:
    frames = _frames(60, 3)  # the demo's node answers detection every 3rd plan
    chosen = sheet_frames(frames)
    assert len(chosen) == 12
    assert all(frame.detected for frame in chosen)
    assert chosen[0] is frames[0] and chosen[-1] is frames[57]  # spread over the whole drive


def test_too_few_detection_answers_leave_the_sheet_evenly_spaced() -> None:
    frames = _frames(30, 10)  # 3 answers for 12 panels
    chosen = sheet_frames(frames)
    assert [round(frame.stamp_s * 10) for frame in chosen] == list(np.linspace(0, 29, 12).round().astype(int))
    assert sheet_frames(frames[:5]) == frames[:5]
