"""The console script's entry point: as small as can be, so that Ctrl-C at any moment, even
while the command line's modules are still being imported, ends with one line and exit code
130, never a traceback."""

import sys

INTERRUPTED = 130


def main() -> int:
    try:
        from workbench.cli import main as run

        return run()
    except KeyboardInterrupt:
        print("interrupted; run the same command again to continue", file=sys.stderr)
        return INTERRUPTED
