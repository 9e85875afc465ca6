"""The server that `workbench dashboard` runs as its child: Optuna's dashboard
(``optuna_dashboard.wsgi``) behind the host guard (``workbench.cli.host_guard``), on wsgiref's
threaded server.

    python -m workbench.cli.dashboard_server STORAGE --host H --port P [--allowed-host NAME ...]

STORAGE carries no password: libpq reads it from PGPASSWORD.
"""

from __future__ import annotations

import argparse
import socket
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from workbench.cli.host_guard import HostGuard, allowed_hosts


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    def log_request(self, code="-", size="-"):  # refusals and errors, not the page's polling
        if str(code).startswith(("4", "5")):
            super().log_request(code, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.cli.dashboard_server")
    parser.add_argument("storage")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--allowed-host", action="append", default=[])
    args = parser.parse_args(argv)
    try:  # first: a port that is taken fails at once, not after the imports
        server = make_server(args.host, args.port, None, handler_class=_Handler,
                             server_class=_Server6 if ":" in args.host else _Server)
    except OSError as err:
        print(f"error: cannot listen on {args.host} port {args.port}: {err.strerror or err}",
              file=sys.stderr)
        return 1
    import optuna_dashboard

    server.set_app(HostGuard(optuna_dashboard.wsgi(args.storage),
                             allowed_hosts(args.host, args.port, args.allowed_host)))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
