"""The embedded model's tasks: generators of prompts and checkable answers."""
