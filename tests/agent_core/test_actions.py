"""Structured actions and their JSON form."""

from __future__ import annotations

import json

import pytest

from agent_core.actions import (
    ACTION_TYPES,
    ActionError,
    Click,
    Drag,
    Hotkey,
    McpCall,
    Scroll,
    Type,
    Wait,
    action_from_dict,
    action_to_dict,
)

EXAMPLES = [
    Click(x=10, y=20),
    Drag(x1=1, y1=2, x2=300, y2=400),
    Scroll(x=5, y=6, direction="down", amount=3),
    Hotkey(keys=("ctrl", "shift", "t")),
    Type(content="hello\n"),
    Wait(seconds=0.5),
    McpCall(server="fs", tool="read", arguments={"path": "/tmp/x"}),
]


@pytest.mark.parametrize("action", EXAMPLES, ids=lambda a: a.kind)
def test_json_form_round_trips_through_json_text(action):
    assert action_from_dict(json.loads(json.dumps(action_to_dict(action)))) == action


def test_every_registered_kind_names_its_own_class():
    assert all(cls.kind == kind for kind, cls in ACTION_TYPES.items())
    assert len(ACTION_TYPES) == 23


def test_type_with_a_trailing_newline_submits():
    assert Type(content="go\n").submits and not Type(content="go").submits


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "teleport"}, "unknown action type 'teleport'; valid: "),
        ({"type": "click", "x": 1}, "click: "),
        ({"type": "click", "x": 1, "y": 2, "z": 3}, "unknown field(s) z"),
        ({"type": "click", "x": -5, "y": 2}, "click.x must be >= 0"),
        ({"type": "click", "x": "1", "y": 2}, "click.x must be an integer"),
        ({"type": "click", "x": True, "y": 2}, "click.x must be an integer"),
        ({"type": "scroll", "x": 1, "y": 2, "direction": "sideways"}, "scroll.direction must be one of"),
        ({"type": "hotkey", "keys": []}, "hotkey.keys must be a non-empty list"),
        ({"type": "wait", "seconds": 999}, "wait.seconds must be a number in [0, 60]"),
        ({"type": "terminal", "command": "sleep 9", "timeout": 1e9}, "terminal.timeout must be a number in"),
        ({"type": "terminal", "command": "ls", "timeout": -1}, "terminal.timeout must be a number in"),
        ({"type": "terminal", "command": "ls", "timeout": float("nan")}, "terminal.timeout must be a number"),
        ({"type": "terminal", "command": "ls", "timeout": "30"}, "terminal.timeout must be a number in"),
        (["click", 1, 2], "an action must be an object"),
    ],
)
def test_malformed_actions_raise_action_error_saying_why(data, message):
    with pytest.raises(ActionError) as err:
        action_from_dict(data)
    assert message in str(err.value)
