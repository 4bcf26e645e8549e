"""CLI subcommands: each module exposes ``register(subparsers)``, which adds its
parser and sets ``func`` (called with the parsed args; returns the exit status)."""
