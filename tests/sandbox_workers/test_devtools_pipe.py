"""The host's end of a browser's DevTools pipe (sandbox_workers.devtools), without a browser."""

from __future__ import annotations

import os

import pytest

from sandbox_workers.devtools import DevToolsPipe


def test_closing_a_pipe_never_closes_a_descriptor_it_no_longer_owns() -> None:
    # The child's ends are closed once the child has them; their numbers are then free for anyone (the
    # local DevTools server's listening socket took one, and a second close shut it: no endpoint).
    pipe = DevToolsPipe()
    numbers = set(pipe.child_fds)
    pipe.started()
    held = []
    while len(held) < 64 and not numbers <= set(held):
        held.append(os.open(os.devnull, os.O_RDONLY))
    try:
        assert numbers <= set(held)
        pipe.close()
        pipe.close()
        for fd in held:
            os.fstat(fd)  # raises if it was closed under its owner
    finally:
        for fd in held:
            os.close(fd)


def test_a_pipe_whose_browser_is_gone_refuses_clients_and_commands() -> None:
    pipe = DevToolsPipe()
    os.close(pipe.child_fds[1])  # the browser's write end: as when it exits, the reader meets its end
    pipe.started()
    pipe._reader.join(5)  # type: ignore[union-attr]
    assert not pipe.alive
    with pytest.raises(BrokenPipeError):
        pipe.connect(lambda m: None)
    pipe.close()
    with pytest.raises(BrokenPipeError):
        pipe.send({"id": 1, "method": "Browser.getVersion"})
