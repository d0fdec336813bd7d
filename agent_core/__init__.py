"""The agent and learning side of the flywheel: actions, observations, trajectories, policies, training.

Pure Python: never imports Django, Celery or Channels; torch is imported lazily where training needs it.
"""

__version__ = "0.1.0"
