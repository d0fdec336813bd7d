"""The random streams a trainer draws from, as checkpoint state: Python's `random`, torch's CPU
generator and, where CUDA was used, each GPU's. A resumed run sets them back, so it goes on drawing
the numbers (dropout masks, sampling) the uninterrupted run would have drawn next."""

from __future__ import annotations

import random
from typing import Any

from agent_core.training.errors import lazy


def rng_state() -> dict[str, Any]:
    """The current state of every random stream, for `torch.save` (None for CUDA never initialised:
    its streams are still where the run's seed put them, and reading them would start CUDA)."""
    torch = lazy("torch")
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(state: dict[str, Any] | None) -> None:
    """Set the random streams back to `rng_state()`'s `state` (None, from an older checkpoint: left
    as the run's seed set them). GPU streams are set when this machine has the GPUs they came from."""
    if not state:
        return
    torch = lazy("torch")
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())  # loaded with map_location, it may sit on the GPU
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) <= torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
