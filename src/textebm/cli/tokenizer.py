"""tokenizer commands."""

COMMANDS: dict = {}
