"""Execute notebooks into an output folder (executed .ipynb + .html), leaving the sources alone.

    python tools/run_notebooks.py --out build/notebooks notebooks/*.ipynb
    python tools/run_notebooks.py --in-place --stamp notebooks/*.ipynb   (publishing: make publish)

Each notebook runs with its own folder as the working directory, as JupyterLab would run it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from tqdm import tqdm


def coalesce_streams(nb) -> None:
    """Drop stderr streams (progress bars and library warnings are for the person watching, not
    for the stored notebook; errors are error outputs and stay), merge consecutive stream outputs
    and keep only what a terminal would show after each carriage return, so stored notebooks stay
    small and readable."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stderr":
                continue
            if (
                merged
                and out.output_type == "stream"
                and merged[-1].output_type == "stream"
                and merged[-1].name == out.name
            ):
                merged[-1].text += out.text
            else:
                merged.append(out)
        for out in merged:
            if out.output_type == "stream":
                out.text = "\n".join(
                    line.rsplit("\r", 1)[-1] if line.strip("\r") else line for line in out.text.split("\n")
                )
        for out in merged:
            # IPython.display.Code renders as HTML, LaTeX and plain text; JupyterLab and GitHub show
            # the highlighted HTML, so the LaTeX and plain copies of every source listing are dropped
            data = out.get("data", {})
            if "text/html" in data and "text/latex" in data:
                del data["text/latex"]
            if 'class="highlight"' in "".join(data.get("text/html", "")):
                data.pop("text/plain", None)
        cell.outputs = merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("notebooks", nargs="+")
    ap.add_argument("--out", help="folder for executed copies and HTML")
    ap.add_argument("--in-place", action="store_true", help="write outputs back into the sources")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = ap.parse_args(argv)
    if not args.out and not args.in_place:
        ap.error("give --out or --in-place")
    failures = 0
    for path in tqdm([Path(p) for p in args.notebooks], desc="notebooks", unit="nb"):
        nb = nbformat.read(path, as_version=4)
        start = time.time()
        client = NotebookClient(
            nb,
            timeout=args.timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            # the kernel's own log (ipykernel 7 warns on every start that its local TCP is not
            # encrypted) stays out of the console; cell errors still come back as outputs
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
        try:
            client.execute()
            status = "ok"
        except Exception as exc:  # keep going: report every failing notebook
            failures += 1
            status = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        tqdm.write(f"{path.name}: {status} ({time.time() - start:.0f} s)")
        coalesce_streams(nb)
        if args.in_place:
            nbformat.write(nb, path)
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out / path.name)
            from nbconvert import HTMLExporter  # only needed for the HTML copies

            html, _ = HTMLExporter().from_notebook_node(nb)
            (out / path.with_suffix(".html").name).write_text(html)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
