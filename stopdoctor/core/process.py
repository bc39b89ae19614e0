"""Process-wide settings a command wants before anything is imported: `tune_for(args)`.

Called first by the entry points (`stopdoctor/__main__.py`, the `stopdoctor` script) and again by
`stopdoctor.cli.main` (idempotent). Imports nothing of the package.
"""

from __future__ import annotations

import gc
import os

# New objects between young collections for a short command (Python's default: 700).
SHORT_COMMAND_GC_THRESHOLD = 100_000


def tune_for(args: list[str]) -> None:
    """For `inspect` (one model read, no torch, no program started):

    - numpy's OpenBLAS starts a thread a core, and they spin after each call: `inspect --weights`
      (a few hundred rows, one small matrix product) used ~100 ms more CPU for no gain in wall
      time. One thread unless the user chose.
    - the cyclic collector ran ~40 times in a cold GGUF inspect (most while the command's modules
      are imported; ~8 ms), each over objects that live to the end: one process reading one model
      lets it run a few times. Reference counting still frees everything acyclic.

    Other commands (logs over millions of lines, generate with torch) keep Python's settings.
    """
    if args[:1] == ["inspect"]:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        gc.set_threshold(SHORT_COMMAND_GC_THRESHOLD, 10, 10)
