"""Where a sweep's artifacts go: a root every worker host reaches, named in the spec
(``artifact_root``), on the command line (``--artifact-root``) or by ``WORKBENCH_ARTIFACTS``.

Allowed roots (MLflow's artifact repositories do the writing):

- an absolute path or ``file:///PATH``: a folder every host mounts at the same path (NFS, a
  cluster's shared filesystem);
- ``s3://BUCKET/PREFIX`` (S3 and S3-compatible stores; credentials and ``MLFLOW_S3_ENDPOINT_URL``
  from the environment, as MLflow reads them), ``gs://``, ``wasbs://``, ``abfss://``;
- ``mlflow-artifacts://HOST:PORT[/PATH]``: MLflow's artifact proxy (``mlflow server
  --artifacts-only --serve-artifacts``), stored as the ``http://HOST:PORT/api/2.0/
  mlflow-artifacts/artifacts/PATH`` URL that MLflow's HTTP artifact repository writes to
  without a tracking server (``http(s)://`` URLs of that form are taken as they are).

Without one, artifacts go to a folder beside the store on the host that created the sweep's
experiment; the experiment records that host, and workers on any other host refuse to run
(``check_reachable``) rather than write artifacts where nobody else finds them.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

PROXY_PATH = "/api/2.0/mlflow-artifacts/artifacts"
HOST_TAG = "workbench.artifact_host"  # on an experiment whose artifacts are host-local
ALLOWED = ("an absolute path or file:///PATH on a filesystem every host mounts, s3://BUCKET/"
           "PREFIX, gs://, wasbs://, abfss://, or mlflow-artifacts://HOST:PORT[/PATH] (MLflow's "
           "artifact server)")
_OBJECT_STORES = ("s3", "gs", "wasbs", "abfss")


class ArtifactRootError(RuntimeError):
    """The sweep's artifacts cannot go where this worker would put them (the message says
    why and what to do)."""


class BadArtifactRoot(ValueError):
    """An artifact root this module cannot use; the message says what is allowed."""


def normalise_root(value: str) -> str:
    """The artifact root URI for ``value`` (see the module's docstring); BadArtifactRoot
    otherwise."""
    text = value.strip()
    if not text:
        raise BadArtifactRoot(f"empty; allowed: {ALLOWED}")
    if text.startswith("/"):
        return Path(text).as_uri().rstrip("/")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise BadArtifactRoot(f"{text}: a file URI must be file:///ABSOLUTE/PATH")
        return Path(unquote(parts.path)).as_uri().rstrip("/")
    if scheme in _OBJECT_STORES:
        if not parts.netloc:
            raise BadArtifactRoot(f"{text}: name the bucket ({scheme}://BUCKET/PREFIX)")
        return text.rstrip("/")
    if scheme == "mlflow-artifacts":
        if not parts.netloc or parts.port is None:
            raise BadArtifactRoot(f"{text}: name the artifact server's host and port "
                                  "(mlflow-artifacts://HOST:PORT[/PATH])")
        return f"http://{parts.netloc}{PROXY_PATH}{parts.path}".rstrip("/")
    if scheme in ("http", "https"):
        if not parts.netloc or not parts.path.startswith(PROXY_PATH):
            raise BadArtifactRoot(f"{text}: an HTTP root must be an MLflow artifact server's "
                                  f"{PROXY_PATH} URL; allowed: {ALLOWED}")
        return text.rstrip("/")
    if not scheme:
        raise BadArtifactRoot(f"{text}: a relative path means a different folder on each "
                              f"host; allowed: {ALLOWED}")
    raise BadArtifactRoot(f"{text}: unsupported scheme {scheme}; allowed: {ALLOWED}")


def local_folder(root: str) -> Path | None:
    """The folder of a ``file://`` root (None for other roots)."""
    return Path(unquote(urlsplit(root).path)) if root.startswith("file://") else None


def experiment_location(root: str, name: str) -> str:
    """The artifact location of the experiment ``name`` under ``root``."""
    if root.startswith("file://"):  # as Path.as_uri() writes it (quoted), as before
        return (local_folder(root) / name).as_uri()
    return f"{root}/{name}"


class HostLocalArtifacts(ArtifactRootError):
    """A worker on another host than the one whose folder holds the sweep's artifacts."""


def check_reachable(experiment, host: str) -> None:
    """Raise HostLocalArtifacts when ``experiment``'s artifacts go to a folder of another host
    than ``host`` (its ``HOST_TAG``)."""
    owner = experiment.tags.get(HOST_TAG)
    if owner is not None and owner != host:
        raise HostLocalArtifacts(
            f"sweep {experiment.name}: its artifacts go to {experiment.artifact_location}, a "
            f"folder of host {owner}, and this worker runs on {host}; give the sweep an "
            f"artifact root every host reaches (artifact_root in the spec or --artifact-root "
            f"on the first run: {ALLOWED})")
