"""Running the ``cdclake`` command as a user does, and what its failures must look like."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: the console script of the interpreter running the tests (the checkout's .venv)
CDCLAKE = str(Path(sys.executable).parent / "cdclake")


def one_error_line(out: subprocess.CompletedProcess[str], command: str) -> str:
    """Exit 2 and exactly one line on stderr, cdclake's own, no traceback; that line."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, f"{out.args} exited {out.returncode}: {out.stderr[-4000:]}"
    assert len(lines) == 1, f"{out.args} printed more than one line:\n{out.stderr}"
    assert lines[0].startswith(f"cdclake {command}: error: "), lines[0]
    assert "Traceback" not in out.stderr + out.stdout
    return lines[0]
