"""models commands."""

COMMANDS: dict = {}
