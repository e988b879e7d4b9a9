"""Waiting for a child a test forked, with a bound: a hang fails the test
naming the child instead of holding the test process for ever."""

import os
import signal
import time

import pytest


def ended(pid, within=120.0):
    """The exit status of a forked child; a child that has not ended
    ``within`` seconds hangs (killed, and the test fails instead of hanging)."""
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child {pid} still ran after {within} s: it hung")
