"""How the ``slaq`` commands write their lines when the reader goes away (``| head``) or a
stream is closed (``2>&-``), and the exit statuses that say so."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away

#: The streams :func:`quiet` silenced during the current command: the exit status says so.
output_lost: list[TextIO] = []


def quiet(stream: TextIO) -> None:
    """Send the rest of ``stream`` (standard output or error) to /dev/null: its reader has gone
    (``slaq ... | head``).

    Python raises ``BrokenPipeError`` where a Unix tool would get SIGPIPE; after this call the
    process can finish its work (and exit) without writing to the closed pipe again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)
    output_lost.append(stream)


def printer(stream: TextIO | None) -> Callable[[str], None]:
    """``print`` to ``stream`` for a command's lines; when the stream's reader has gone
    (``| head``), or it is closed (``2>&-``), the command goes on with its work (files, plots)
    without printing."""

    def say(msg: str) -> None:
        if stream is None:
            return
        try:
            print(msg, file=stream, flush=True)
        except BrokenPipeError:
            quiet(stream)

    return say
