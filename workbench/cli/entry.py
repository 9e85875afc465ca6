"""The console script's entry point: as small as can be, so that Ctrl-C at any moment, even
while the command line's modules are still being imported, ends with one line and exit code
130, never a traceback; nor does a reader that stops reading (``| head``)."""

import os
import sys

INTERRUPTED = 130
BROKEN_PIPE = 141  # as a shell reports a process ended by SIGPIPE


def main() -> int:
    try:
        from workbench.cli.main import main as run

        return run()
    except KeyboardInterrupt:
        print("interrupted; run the same command again to continue", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `workbench methods | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return BROKEN_PIPE
