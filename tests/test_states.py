"""webapp/states.py, the map of every stateful row, stays true: each state of each model is listed
with the service function that moves a row into it, and each of those functions exists."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from webapp.common.jobs import Job, JobStatus
from webapp.states import STATES


def _state_field(model):  # type: ignore[no-untyped-def]
    names = {f.name for f in model._meta.get_fields()}
    for name in ("status", "state"):
        if name in names and model._meta.get_field(name).choices:
            return model._meta.get_field(name)
    return None


def test_every_model_with_states_is_in_the_map():
    stateful = {
        model._meta.label
        for model in apps.get_models()
        if model.__module__.startswith("webapp.") and _state_field(model) is not None
    }
    assert stateful == set(STATES), (stateful - set(STATES), set(STATES) - stateful)


@pytest.mark.parametrize("label", sorted(STATES))
def test_the_map_lists_each_state_of_the_model_once(label):
    field = _state_field(apps.get_model(label))
    assert [value for value, _ in field.choices] == list(STATES[label])


@pytest.mark.parametrize(
    "label,state,path",
    [(label, state, path) for label, states in STATES.items() for state, path in states.items() if path],
)
def test_each_named_service_function_exists(label, state, path):
    module, _, name = path.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name, None)), f"{label} {state}: {path}"


def test_the_five_jobs_share_one_lifecycle_with_one_word_per_state():
    jobs = sorted(m._meta.label for m in apps.get_models() if issubclass(m, Job))
    assert jobs == [
        "datasets.DatasetExport",
        "datasets.FlywheelIteration",
        "episodes.Episode",
        "training.PolicyMerge",
        "training.TrainingRun",
    ]
    for label in jobs:
        assert list(STATES[label]) == [s.value for s in JobStatus], label
        model = apps.get_model(label)
        for name in ("status", "worker", "attempt", "heartbeat_at", "started_at", "finished_at", "error"):
            model._meta.get_field(name)  # FieldDoesNotExist otherwise
