"""A WSGI guard for a server bound to one address: it refuses (403), before the app sees them,
requests whose Host header names no allowed host (DNS rebinding: a page of evil.example whose
name now resolves to 127.0.0.1) and cross-origin writes (POST, PUT, PATCH, DELETE from a page
of another origin)."""

from __future__ import annotations

import ipaddress

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int, names: list[str] = ()) -> list[str]:
    """The Host headers a server bound at host:port answers: the loopback names and the bound
    address (not a wildcard such as 0.0.0.0), with the port; and each of ``names`` as given,
    with the port too when it names none."""
    bound = f"[{host}]" if ":" in host else host
    wildcard = bound in ("0.0.0.0", "[::]")
    hosts = [f"{h}:{port}" for h in (*LOOPBACK, *([] if wildcard else [bound]))]
    for name in names:
        name = f"[{name}]" if name.count(":") > 1 and not name.startswith("[") else name
        hosts.append(name)
        if ":" not in name.rsplit("]", 1)[-1]:  # no port of its own
            hosts.append(f"{name}:{port}")
    return list(dict.fromkeys(h.lower() for h in hosts))


class HostGuard:
    """``app`` answering only requests whose Host is one of ``hosts`` and writes whose Origin,
    when sent, is http(s):// one of them; 403 otherwise."""

    def __init__(self, app, hosts: list[str]):
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.origins = frozenset(f"{scheme}://{h}" for scheme in ("http", "https")
                                 for h in self.hosts)

    def __call__(self, environ, start_response):
        host = environ.get("HTTP_HOST", "").lower()
        origin = environ.get("HTTP_ORIGIN")
        if host not in self.hosts:
            return _refuse(start_response, "this Host header is not served here (`workbench "
                                           "ui|dashboard --allowed-host NAME` adds a name)")
        if (environ.get("REQUEST_METHOD", "GET").upper() in WRITES and origin is not None
                and origin.lower() not in self.origins):
            return _refuse(start_response, "a write from another origin")
        return self.app(environ, start_response)


def _refuse(start_response, why: str) -> list[bytes]:
    body = f"403 Forbidden: {why}\n".encode()
    start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                     ("Content-Length", str(len(body)))])
    return [body]
