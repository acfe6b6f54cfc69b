"""How the archive_command starts cdclake from its copy: only once no other user can change it.

``python -I -S -c BOOTSTRAP COPY COMMAND ARGS...`` (:data:`cdclake.archive.runtime.BOOTSTRAP`)
checks every directory on the path to this file and the file itself, then runs this file's
text; :func:`enter` checks what the interpreter will import from — every directory above its
own library, the copy, every directory above the copy and everything in it — and puts the
copy on the import path; only then does BOOTSTRAP import ``cdclake.cli`` and run ``cdclake
COMMAND ARGS...``. Trusted are root and the user running it; anything else they do not own,
anything group or others may write to, and any symlink (its target is not checked; its mode
reads as writable by all) stops the command with one line and exit status 2, before a module
of the copy is imported, and PostgreSQL keeps the WAL and calls again.

Standard library only, and only modules the interpreter has loaded before any code runs
(``os``, ``stat``, ``sys``): nothing is imported from a path before it is checked.
:mod:`cdclake.archive.runtime` imports the same functions to check the copies it makes and
the interpreter it picks.
"""

from __future__ import annotations

import os
import stat
import sys


def above(path: str) -> list[str]:
    """``/``, every directory down to ``path`` (absolute) and ``path`` itself."""
    return ["/", *(path[:i] for i in range(1, len(path)) if path[i] == "/"), path]


def below(path: str) -> list[str]:
    """Every directory, file and symlink under the directory ``path``."""
    return [os.path.join(d, n) for d, dirs, files in os.walk(path) for n in dirs + files]


def unsafe(paths: list[str], ids: set[int]) -> str | None:
    """The first of ``paths`` that a user outside ``ids`` owns or that group or others may
    write to, as ``path (mode, owner uid N)``; None if there is none."""
    for path in paths:
        st = os.lstat(path)
        if st.st_uid not in ids or st.st_mode & 0o022:
            return f"{path} ({stat.filemode(st.st_mode)}, owner uid {st.st_uid})"
    return None


def enter() -> None:
    """``sys.argv``: ``[-c, COPY, COMMAND, ARGS...]`` -> ``[cdclake, COMMAND, ARGS...]``, with
    COPY on the import path once nothing there or above could be changed by another user."""
    copy = sys.argv.pop(1)
    ids = {0, os.getuid()}
    library = [q for p in sys.path if os.path.exists(p) for q in above(os.path.realpath(p))]
    problem = unsafe(library + above(copy) + below(copy), ids)
    if problem is not None:
        print(f"cdclake {sys.argv[1]}: error: not running cdclake from {copy}: {problem} may "
              f"be changed by a user other than root and uid {os.getuid()}", file=sys.stderr)
        sys.exit(2)
    sys.path.append(copy)
    sys.argv[0] = "cdclake"


if __name__ == "__main__":  # BOOTSTRAP runs this text in __main__
    enter()
