"""Fetch the pinned anchors (sglang, vllm wheels) and extract the kernel files they provide.

    python tools/fetch_anchors.py [sglang] [vllm] [--root DIR] [--find-links DIR] [--keep-wheels]

The pins and the extraction live in :mod:`inkling_workbook.measure.anchors`; see docs/anchors.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inkling_workbook.measure.anchors import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
