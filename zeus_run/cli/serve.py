"""``zeus-run serve``: the batch-size server for training jobs that share no filesystem with zeus-run."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from zeus_run.cli._common import handle_errors, setup_logging

_DEFAULT_PORT = 7787  # zeus_run.remote.DEFAULT_PORT (not imported here: --help stays fast)
_DEFAULT_MAX_BODY = 64 * 1024  # zeus_run.server._gate.DEFAULT_MAX_BODY


@handle_errors
def serve_command(
    root: Path = typer.Option(..., "--root", help="Directory of the jobs: job NAME is the run directory ROOT/NAME."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; beyond loopback needs --token-file."),
    port: int = typer.Option(_DEFAULT_PORT, "--port", min=0, max=65535, help="Port to listen on (0: any free one)."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="File holding the bearer token clients send. Without it: loopback only, and a fresh token is "
        "written to ROOT/.serve.token.",
    ),
    max_body: int = typer.Option(
        _DEFAULT_MAX_BODY, "--max-body", min=1024, help="Largest request body in bytes (larger: 413)."
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        max=64,
        help="Processes that answer requests (Linux). More use more cores; a job stays consistent across them "
        "(each ask and tell takes its run directory's lock). They stop together: if one dies, the server exits.",
    ),
    allow_path: list[Path] = typer.Option(
        [],
        "--allow-path",
        help="A directory outside the jobs whose files a registered spec may name (accounting CSVs, export "
        "stores, scripts); repeatable. Without it, a spec may name files only inside its own run directory.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="One log line per request (and per refusal)."),
) -> None:
    """Serve jobs over HTTP to training scripts that share no filesystem with zeus-run (pods, managed services).

    Runs in the foreground until SIGINT/SIGTERM; logs go to stderr. Each job is a
    run directory under --root, exactly as `zeus-run run` writes it, so `history`,
    `plot` and `replay` work on it. Clients set ZEUS_SERVER=http://HOST:PORT, the
    token (ZEUS_SERVER_TOKEN or ZEUS_SERVER_TOKEN_FILE) and ZEUS_SERVER_JOB. A
    second server on the same root is refused (exit code 75). SIGINT/SIGTERM stop it
    with a line in the log and exit code 0. Put TLS in front
    with a reverse proxy (README, "The batch-size server").

    Example:

        zeus-run serve --root /srv/zeus-jobs

        zeus-run serve --root /srv/zeus-jobs --host 0.0.0.0 --token-file /run/secrets/zeus-token -v

        zeus-run serve --root /srv/zeus-jobs --workers 2    # two processes: asks and tells on both cores

        zeus-run serve --root /srv/zeus-jobs --allow-path /srv/grid-data   # specs may name CSVs there
    """
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        from zeus_run.errors import UsageError

        raise UsageError(
            f"zeus-run serve needs the server extra ({exc.name} is not installed): pip install 'zeus-run[server]'."
        ) from None
    from zeus_run.server import ServeSettings, serve

    setup_logging()
    access = logging.getLogger("zeus_run.server.access")
    access.setLevel(logging.INFO if verbose else logging.WARNING)
    uv = logging.getLogger("uvicorn")
    uv.handlers = list(logging.getLogger("zeus_run").handlers)
    uv.setLevel(logging.WARNING)
    uv.propagate = False
    serve(
        ServeSettings(
            root=root,
            host=host,
            port=port,
            token_file=token_file,
            max_body=max_body,
            workers=workers,
            allow_paths=tuple(allow_path),
        )
    )
