"""``zeus-run serve``: the batch-size server for training jobs that share no filesystem with zeus-run.

``zeus-run serve --root R`` serves; ``zeus-run serve tokens list|rotate|revoke --root R`` hands out and takes
back the jobs' own tokens (`zeus_run.server._tokens`), on a running server or a stopped one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from zeus_run.cli._common import Format, FormatOption, handle_errors, setup_logging

_DEFAULT_PORT = 7787  # zeus_run.remote.DEFAULT_PORT (not imported here: --help stays fast)
_DEFAULT_MAX_BODY = 64 * 1024  # zeus_run.server._gate.DEFAULT_MAX_BODY


_ROOT_HELP = "Directory of the jobs: job NAME is the run directory ROOT/NAME."


@handle_errors
def serve_command(
    ctx: typer.Context,
    root: Path | None = typer.Option(None, "--root", help=_ROOT_HELP + " Required."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; beyond loopback needs --token-file."),
    port: int = typer.Option(_DEFAULT_PORT, "--port", min=0, max=65535, help="Port to listen on (0: any free one)."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="File holding the operator's token. Without it: loopback only, with the token kept in "
        "ROOT/.serve.token (made on the first start, reused after).",
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
    `plot` and `replay` work on it. Clients set ZEUS_SERVER=http://HOST:PORT, their
    job's token (ZEUS_SERVER_TOKEN or ZEUS_SERVER_TOKEN_FILE) and ZEUS_SERVER_JOB.
    Registering a job with the operator's token answers the job's own token; `tokens`
    lists, rotates and revokes them. A second server on the same root is refused
    (exit code 75). SIGINT/SIGTERM stop it with a line in the log and exit code 0.
    Put TLS in front with a reverse proxy (docs/server-operations.md).

    Example:

        zeus-run serve --root /srv/zeus-jobs

        zeus-run serve tokens rotate --root /srv/zeus-jobs mnist-nightly > mnist.token

        zeus-run serve --root /srv/zeus-jobs --host 0.0.0.0 --token-file /run/secrets/zeus-token -v

        zeus-run serve --root /srv/zeus-jobs --workers 2    # two processes: asks and tells on both cores

        zeus-run serve --root /srv/zeus-jobs --allow-path /srv/grid-data   # specs may name CSVs there
    """
    if ctx.invoked_subcommand is not None:
        return  # `serve tokens ...`
    if root is None:
        from zeus_run.errors import UsageError

        raise UsageError(
            "Missing option '--root': the directory of the jobs, e.g. zeus-run serve --root /srv/zeus-jobs."
        )
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


tokens_app = typer.Typer(
    name="tokens",
    help="The jobs' own tokens: list them, make a new one for a job (rotate), take one back (revoke).\n\n"
    "Example: zeus-run serve tokens list --root /srv/zeus-jobs",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
RootOption = typer.Option(..., "--root", help=_ROOT_HELP)
JobArgument = typer.Argument(..., help="The job's name on the server (its run directory is ROOT/JOB).")


@tokens_app.command("list")
@handle_errors
def tokens_list(root: Path = RootOption, fmt: Format = FormatOption) -> None:
    """List the jobs' tokens: each job, its token's short id (as logs name it) and when it was made.

    Only the tokens' hashes are kept, so no token can be shown again; `rotate` makes a new one.

    Example:

        zeus-run serve tokens list --root /srv/zeus-jobs --format json
    """
    rows = [{"job": t.job, "token_id": t.id, "created_at": t.created_at} for t in _store(root).tokens()]
    if fmt is Format.json:
        typer.echo(json.dumps(rows, indent=1))
        return
    if fmt is Format.csv:
        typer.echo("job,token_id,created_at")
        for r in rows:
            typer.echo(f"{r['job']},{r['token_id']},{r['created_at']}")
        return
    if not rows:
        typer.echo("no job tokens (registering a job with the operator's token makes its token)", err=True)
        return
    width = max(3, *(len(r["job"]) for r in rows))
    typer.echo(f"{'job':<{width}}  token_id  created_at")
    for r in rows:
        typer.echo(f"{r['job']:<{width}}  {r['token_id']:<8}  {r['created_at']}")


@tokens_app.command("rotate")
@handle_errors
def tokens_rotate(job: str = JobArgument, root: Path = RootOption) -> None:
    """Make a new token for a job and print it on stdout (shown only now); its old token stops working.

    A name that is not registered yet gets a token too: that token may register it (Zeus's client registers
    its job itself). A running server takes the change within a second.

    Example:

        zeus-run serve tokens rotate --root /srv/zeus-jobs mnist-nightly > mnist.token
    """
    from zeus_run.server import check_job_name

    check_job_name(job)
    token, entry = _store(root).rotate(job)
    registered = (root / job / "spec.yaml").is_file()
    typer.echo(token)
    note = "" if registered else f" (job {job!r} is not registered yet: this token may register it)"
    typer.echo(f"new token for job {job!r}, id {entry.id}; its old token no longer works{note}", err=True)


@tokens_app.command("revoke")
@handle_errors
def tokens_revoke(job: str = JobArgument, root: Path = RootOption) -> None:
    """Take a job's token back: it stops working (a running server takes it within a second). The job stays.

    Example:

        zeus-run serve tokens revoke --root /srv/zeus-jobs mnist-nightly
    """
    from zeus_run.errors import UsageError

    gone = _store(root).revoke(job)
    if gone is None:
        raise UsageError(f"Job {job!r} has no token under {str(root)!r}; `zeus-run serve tokens list` shows them.")
    typer.echo(f"revoked job {job!r}'s token (id {gone.id})", err=True)


@handle_errors
def register_command(
    spec_path: Path = typer.Argument(..., metavar="JOB.yaml", help="The job spec (YAML), as `zeus-run run` takes it."),
    server: str | None = typer.Option(
        None, "--server", help="The server's URL (default: ZEUS_SERVER), e.g. https://zeus.example.org."
    ),
    job: str | None = typer.Option(None, "--job", help="The job's name on the server (default: the spec's name)."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="File holding the token: the operator's (a new job), or the job's own (default: ZEUS_SERVER_TOKEN, "
        "else ZEUS_SERVER_TOKEN_FILE).",
    ),
) -> None:
    """Register a job on a running server from its spec file, and print the server's answer (JSON) on stdout.

    The spec is sent as it is written: `workdir` and `run_dir` do not apply on the server and are ignored.
    With the operator's token, a new job's answer carries its own token (`job_token`), shown only there.
    The same spec again changes nothing. Exit code 2 when the server refuses the spec (invalid, a changed
    decision setting: 409, a file outside the job), with its answer in one line.

    Example:

        zeus-run serve register mnist.yaml --server https://zeus.example.org --token-file /etc/zeus-run/operator.token
    """
    from zeus_run.errors import UsageError
    from zeus_run.remote import ServerClient, ServerError, read_token
    from zeus_run.spec import YamlLimitError, load_yaml

    try:
        text = spec_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the job spec {str(spec_path)!r}: {exc}.") from None
    if job is None:
        try:
            data = load_yaml(text).data
        except YamlLimitError as exc:
            raise UsageError(f"{spec_path}: {exc.why}. Fix the file, or check it with zeus-run check.") from None
        name = data.get("name") if isinstance(data, dict) else None
        job = str(name) if name else spec_path.stem
    url = server or os.environ.get("ZEUS_SERVER", "").strip()
    if not url:
        raise UsageError("No server: pass --server URL, or set ZEUS_SERVER (e.g. https://zeus.example.org).")
    try:
        client = ServerClient(url, read_token(None, str(token_file) if token_file else None), retry_s=30.0)
        answer = client.register(job, text)
    except ServerError as exc:
        said = " ".join(str(exc).split())
        if exc.status == 0:
            raise UsageError(f"Cannot register job {job!r} on {url}: {said}") from None
        where = f" ({exc.code}" + (f", {exc.field}" if exc.field else "") + ")" if exc.code else ""
        raise UsageError(f"{spec_path}: the server refused job {job!r}: HTTP {exc.status}{where}: {said}") from None
    typer.echo(json.dumps(answer, indent=1))


def _store(root: Path) -> Any:
    from zeus_run.errors import UsageError
    from zeus_run.server import TokenStore

    if not root.is_dir():
        raise UsageError(f"--root {str(root)!r} is not a directory: name the server's root.")
    return TokenStore(root.absolute())


class ServeGroup(TyperGroup):
    """``serve`` as typer registers a command, with the ``tokens`` commands under it (``serve --root R`` alone
    serves)."""

    def __init__(self, **attrs: Any) -> None:
        attrs.pop("no_args_is_help", None)
        super().__init__(invoke_without_command=True, **attrs)
        self.add_command(typer.main.get_command(tokens_app), "tokens")
        self.add_command(_register_app_command(), "register")


def _register_app_command() -> Any:
    """``serve register`` as a click command."""
    app = typer.Typer(rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
    app.command("register")(register_command)
    return typer.main.get_command(app)


#: The click class `zeus_run.cli._app.LazyGroup` builds ``serve`` with (``serve`` serves; ``serve tokens`` ...).
COMMAND_CLASS = ServeGroup
