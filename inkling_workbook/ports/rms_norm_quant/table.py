"""vLLM's H200 config table for ``rms_norm_dynamic_per_token_quant`` as data
(``helion_h200_table.json``; the facts are cited in :mod:`inkling_workbook.ports.rms_norm_quant.helion`)
and vLLM's picker: what the original runs with and what the port reads its reduction tile from.
Imports neither helion nor the kernels."""

from __future__ import annotations

import functools
import json
from pathlib import Path

_TABLE_PATH = Path(__file__).with_name("helion_h200_table.json")


@functools.cache
def table() -> dict:
    return json.loads(_TABLE_PATH.read_text())


def pick_key(M: int, H: int) -> tuple[int, int]:
    """vLLM's rule: (hidden size nearest H, smallest tuned num_tokens >= M, else the largest)."""
    doc = table()
    best = min(doc["hidden_sizes_in_file"], key=lambda s: abs(s - H))
    tuned = sorted(doc["num_tokens_in_file"])
    return best, next((t for t in tuned if t >= M), tuned[-1])


def production_config(M: int, H: int) -> dict:
    """The table entry vLLM picks for ``M`` rows of width ``H`` (the ``helion.Config`` fields)."""
    key = pick_key(M, H)
    for entry in table()["entries"]:
        if (entry["hidden_size"], entry["num_tokens"]) == key:
            return entry["config"]
    raise ValueError(
        f"vLLM picks hidden_size={key[0]}, num_tokens={key[1]} for M={M}, H={H}; that entry of "
        f"{table()['source']['path']} is not in {_TABLE_PATH.name} (add it from the source file)"
    )


def reduction_tile(M: int, H: int) -> int:
    """The tile of the sum of squares in the production config (its first block size; helion takes
    it as it is, wider than the row too: 2048 for H = 384, the lanes past H masked to 0)."""
    return production_config(M, H)["block_sizes"][0]


def config_label(M: int, H: int) -> str:
    """How tables name the config, e.g. ``helion H200 table 4096/t4096: 1024|4096|2048/1w/5st``."""
    key = pick_key(M, H)
    c = production_config(M, H)
    tiles = "|".join(map(str, c["block_sizes"]))
    return f"helion H200 table {key[0]}/t{key[1]}: {tiles}/{c['num_warps']}w/{c['num_stages']}st"
