"""The ``gpugate`` command: dispatches to the front ends, importing only the one asked for
(a single-file ``gpugate lint`` must not pay for aiohttp or the kubernetes client)."""

from __future__ import annotations

import sys

COMMANDS = {
    "lint": ("lint.cli", "lint_main", "lint manifests (files, directories or - for stdin)"),
    "rules": ("lint.cli", "rules_main", "list the rules, or write their reference with --markdown"),
    "serve": ("webhook.cli", "serve_main", "run the admission webhook (HTTPS)"),
    "audit": ("audit.cli", "audit_main", "why is each pending job pending, and will it ever run?"),
    "snapshot": ("webhook.cli", "snapshot_main", "export the cluster topology to a file for --cluster"),
    "certs": ("webhook.certs", "certs_main", "create or check the webhook's CA and serving certificate"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: gpugate COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "Run 'gpugate COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        from gpugate import __version__

        print(f"gpugate {__version__}")
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        print(f"gpugate: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    import importlib

    module = importlib.import_module(entry[0])
    return int(getattr(module, entry[1])(args[1:]) or 0)
