import pytest

from inkling_workbook.publish import show


def test_source_sends_the_style_sheet_once(monkeypatch):
    from inkling_kernels.fp8 import _format as fp8

    monkeypatch.setattr(show, "_STYLED", set())
    first = show.source(fp8._e4m3_signed)._repr_html_()
    second = show.source(fp8._e4m3_hw, fp8._rcp_approx)._repr_html_()
    assert "<style>" in first and "_e4m3_signed" in first
    assert "<style>" not in second
    # both functions, highlighted (pygments wraps names in spans)
    assert "_e4m3_hw" in second and "_rcp_approx" in second and "<span" in second


def test_source_needs_something_to_show():
    with pytest.raises(ValueError, match="objs"):
        show.source()
