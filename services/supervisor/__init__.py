"""The supervisor behind ``make run``: starts, watches and stops the whole mesh."""
