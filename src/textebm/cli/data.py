"""data commands."""

COMMANDS: dict = {}
