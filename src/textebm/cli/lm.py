"""lm commands."""

COMMANDS: dict = {}
