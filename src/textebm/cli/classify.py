"""classify commands."""

COMMANDS: dict = {}
