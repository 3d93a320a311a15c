"""``webhook serve``: start builds from new model exports (S3 via SNS, or signed posts)."""

from __future__ import annotations

import os

import typer

from trtfarm.cli.common import STORE_OPT, app, fail, store_uri

webhook_app = typer.Typer(no_args_is_help=True, help="Start builds from new model exports (S3 via SNS, or signed "
                                                      "JSON posts).")
app.add_typer(webhook_app, name="webhook")


@webhook_app.command("serve")
def webhook_serve(host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8088, "--port"),
                  topic: list[str] = typer.Option([], "--topic", help="SNS topic ARN to accept (repeatable; "
                                                  "others get 403)"),
                  secret_env: str = typer.Option("TRTFARM_WEBHOOK_SECRET", "--secret-env",
                                                 help="environment variable holding the HMAC secret for /hook"),
                  replay_window: int = typer.Option(300, "--replay-window", min=1, help="seconds a signed post "
                                                    "stays valid"),
                  max_body: int = typer.Option(1 << 20, "--max-body", min=1024, help="largest body in bytes (413)"),
                  sns_verify: bool = typer.Option(True, "--sns-verify/--no-sns-verify",
                                                  help="check SNS message signatures (keep on outside tests)"),
                  allow_root: list[str] = typer.Option([], "--allow-root", help="accept exports only under this "
                                                       "s3://bucket/prefix or folder (repeatable; default: the "
                                                       "store); others get 403"),
                  store: str = STORE_OPT) -> None:
    """Serve POST /sns (S3 notifications through SNS) and POST /hook (HMAC-signed {"model_uri": ...})."""
    from trtfarm.extras import require

    require("fastapi", "uvicorn", "httpx", extra="webhook", purpose="the webhook receiver")
    from trtfarm.triggers.receiver import WebhookConfig, create_app, serve

    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise fail("PREFECT_API_URL is not set: the receiver posts trtfarm.model.exported events to the farm's "
                    "Prefect server (e.g. http://127.0.0.1:4200/api)")
    secret = os.environ.get(secret_env)
    if not secret and not topic:
        raise fail(f"nothing to accept: set {secret_env} for signed posts and/or give --topic ARN for SNS")
    cfg = WebhookConfig(store_uri(store, creates=True), api, secret, set(topic), replay_window, max_body, sns_verify,
                        allow_root)
    create_app(cfg)  # refuses a malformed --allow-root before the server starts
    serve(cfg, host, port)
