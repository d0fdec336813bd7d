"""Key names an agent may write: one int() cannot read is an unknown key (the agent's invalid step),
never a ValueError that a provider would report as a broken environment."""

from __future__ import annotations

import pytest

from agent_core.actions import ActionError
from sandbox_workers.display import keys


@pytest.mark.parametrize("name", ["f²", "F²", "f" + "9" * 5000, "num²"])
def test_key_names_with_digits_int_cannot_read_are_unknown_keys(name: str) -> None:
    with pytest.raises(ActionError):
        keys.key_keysym(name)
    with pytest.raises(keys.KeyNameError):
        keys.playwright_key(name)


def test_function_and_numpad_keys_still_map() -> None:
    assert keys.key_keysym("f5") == keys.key_keysym("F5") != keys.key_keysym("f12")
    assert (keys.playwright_key("f5"), keys.playwright_key("F24"), keys.playwright_key("num7")) == (
        "F5",
        "F24",
        "Numpad7",
    )
