"""SecondOrStepTimer: trigger every N seconds or every N steps (``tf.estimator.SecondOrStepTimer``)."""

from __future__ import annotations

import time


class SecondOrStepTimer:
    """Triggers at most once per ``every_secs`` seconds or once per ``every_steps`` steps.

    Args:
      every_secs: seconds between triggers (float), or None.
      every_steps: steps between triggers (int), or None.

    Raises:
      ValueError: both or neither are given, or a value is negative.
    """

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None) -> None:
        if (every_secs is None) == (every_steps is None):
            raise ValueError("SecondOrStepTimer: give exactly one of every_secs and every_steps.")
        if (every_secs is not None and every_secs < 0) or (every_steps is not None and every_steps < 0):
            raise ValueError("SecondOrStepTimer: every_secs and every_steps must be >= 0.")
        self._every_secs = every_secs
        self._every_steps = every_steps
        self._last_step: int | None = None
        self._last_time: float | None = None

    def reset(self) -> None:
        """Forget the last trigger: the next step triggers."""
        self._last_step = self._last_time = None

    def should_trigger_for_step(self, step: int) -> bool:
        """Whether ``step`` is due: the first step ever, or enough seconds/steps since."""
        if self._last_step is None:
            return True
        if step == self._last_step:
            return False
        if self._every_secs is not None:
            assert self._last_time is not None  # set with _last_step
            return time.time() >= self._last_time + self._every_secs
        assert self._every_steps is not None  # exactly one of the two is set
        return step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step: int) -> tuple[float | None, int | None]:
        """Mark ``step`` as triggered; return (seconds, steps) since the previous trigger."""
        now, last_time, last_step = time.time(), self._last_time, self._last_step
        elapsed: tuple[float | None, int | None] = (
            (None, None) if last_time is None or last_step is None else (now - last_time, step - last_step)
        )
        self._last_time, self._last_step = now, step
        return elapsed

    def next_trigger_step(self, step: int) -> int | None:
        """The first step after ``step`` at which a steps timer triggers, assuming it is
        asked at every step it is due (``step + 1`` before its first trigger); None for a
        seconds timer (time decides, not steps)."""
        if self._every_secs is not None:
            return None
        if self._last_step is None:
            return step + 1
        every = max(self._every_steps or 0, 1)
        due = self._last_step + every
        if due <= step:
            due += ((step - due) // every + 1) * every
        return due

    def last_triggered_step(self) -> int | None:
        """The step of the last trigger, or None."""
        return self._last_step
