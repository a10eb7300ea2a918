"""A clock for the tests of what waits or paces: it stands still until a test sets it or sleeps on it."""


class FakeClock:
    """Called, it reads `now`; sleep(s) moves `now` on by s at once."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds
