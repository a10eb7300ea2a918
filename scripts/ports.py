"""A free TCP port on loopback, for serving the app in this process (scripts/screenshots.py, the tests)."""

import socket


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: the OS picks one by binding port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
