"""Package source shown highlighted in the notebooks (``IPython.display.Code``), with pygments' style
sheet sent once a kernel session: every later listing reuses it (Jupyter and its HTML export apply
a notebook's styles page-wide), so a notebook stores the 5 KB sheet once rather than per listing."""

from __future__ import annotations

import inspect

_STYLED: set[str] = set()


def source(*objs, language: str = "python"):
    """The source of ``objs`` (functions, Triton kernels: their ``.fn``), blank-line separated, as
    highlighted HTML; the style sheet only in the session's first listing of ``language``."""
    from IPython.display import HTML, Code

    if not objs:
        raise ValueError("objs: give at least one function to show")
    text = "\n\n".join(inspect.getsource(getattr(o, "fn", o)) for o in objs)
    html = Code(text, language=language)._repr_html_()
    if language in _STYLED and "</style>" in html:
        html = html.split("</style>", 1)[1]
    _STYLED.add(language)
    return HTML(html)
