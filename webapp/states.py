"""The map of every stateful row: for each model, each of its states and the service function that
moves a row into it. Following calls stops at every `objects.create` and enqueue-by-name; this table
is what a reader follows instead. `tests/test_states.py` keeps it true: every state of every model
with a `status`/`state` field is listed, and every function named here exists.

The five background jobs share one lifecycle and one word per state (`webapp.common.jobs.Job`:
pending → running → finished | failed | cancelled). The others are people's work or mirrors of a
sandbox host, with words of their own.

A value of None means no service writes that state; the note after it says who does.
"""

from __future__ import annotations

STATES: dict[str, dict[str, str | None]] = {
    # --- jobs (webapp.common.jobs) -------------------------------------------------------------
    "episodes.Episode": {
        "pending": "webapp.rollouts.services.batch_create",  # and episode_retry, rollouts._requeue
        "running": "webapp.rollouts.services.episode_run",  # demonstrations: episodes.services.episode_start
        "finished": "webapp.episodes.services.episode_finish",
        "failed": "webapp.rollouts.services.rollouts_reap",  # and episode_finish(env_error), demos_reap
        "cancelled": "webapp.annotation.services.demo_abandon",
    },
    "datasets.DatasetExport": {
        "pending": "webapp.datasets.exports.export_create",
        "running": "webapp.datasets.exports.export_run",
        "finished": "webapp.datasets.exports.export_run",
        "failed": "webapp.datasets.exports.exports_reap",  # and export_run, a broker that is down
        "cancelled": "webapp.datasets.exports.export_cancel",
    },
    "training.TrainingRun": {
        "pending": "webapp.training.services.training_run_launch",  # and resume, the reaper's re-queue
        "running": "webapp.training.services.training_run_execute",
        "finished": "webapp.training.services.training_run_execute",
        "failed": "webapp.training.services.training_runs_reap",  # and training_run_execute
        "cancelled": "webapp.training.services.training_run_stop",  # a running run: at its next checkpoint
    },
    "training.PolicyMerge": {
        "pending": "webapp.training.merging.policy_merge_request",
        "running": "webapp.training.merging.policy_merge_execute",
        "finished": "webapp.training.merging.policy_merge_execute",
        "failed": "webapp.training.merging.policy_merge_execute",  # and a broker that is down
        "cancelled": None,  # a merge takes seconds: nobody cancels one
    },
    "datasets.FlywheelIteration": {
        "pending": None,  # a round is created running (its row is the lock); a failed one is deleted
        "running": "webapp.datasets.rounds.flywheel_round_start",
        "finished": "webapp.datasets.rounds.flywheel_round_close",
        "failed": None,  # a failed round leaves nothing: flywheel_round_close, flywheel_rounds_reap delete it
        "cancelled": None,
    },
    # --- people's work ---------------------------------------------------------------------------
    "rollouts.RolloutBatch": {
        "running": "webapp.rollouts.services.batch_create",
        "finished": "webapp.rollouts.services.batch_advance",
        "cancelled": "webapp.rollouts.services.batch_cancel",
    },
    "annotation.Assignment": {
        "open": "webapp.annotation.services.assignment_create",  # and demo_abandon, demos_reap
        "in_progress": "webapp.annotation.services.demo_start",
        "done": "webapp.annotation.services.demo_submit",
        "cancelled": None,  # no service cancels an assignment yet (Django admin only)
    },
    "reviews.Review": {
        "assigned": "webapp.reviews.services.review_assign",  # and review_resubmit
        "in_progress": "webapp.reviews.services.review_start",
        "accepted": "webapp.reviews.services.review_decide",
        "rejected": "webapp.reviews.services.review_decide",
        "sent_back": "webapp.reviews.services.review_decide",
    },
    # --- mirrors of the sandbox hosts -----------------------------------------------------------
    "sandboxes.SandboxHost": {
        "online": "webapp.sandboxes.services.host_heartbeat",
        "draining": None,  # set by an admin (Django admin): no new leases go to it
        "offline": "webapp.sandboxes.services.hosts_mark_offline",
    },
    "policies.PolicyServer": {  # the server's own state, mirrored by each heartbeat
        "starting": "webapp.policies.services.policy_server_heartbeat",  # and rolling.weights_grant
        "online": "webapp.policies.services.policy_server_heartbeat",
        "offline": "webapp.policies.services.servers_mark_offline",
    },
    "sandboxes.Sandbox": {  # the host's own state, mirrored by each heartbeat
        "starting": "webapp.sandboxes.services.host_heartbeat",
        "idle": "webapp.sandboxes.services.host_heartbeat",
        "leased": "webapp.sandboxes.services.sandbox_lease",  # and lease_acquire
        "resetting": "webapp.sandboxes.services.leases_expire",  # and host_heartbeat
        "unhealthy": "webapp.sandboxes.services.host_heartbeat",
        "stopping": "webapp.sandboxes.services.host_heartbeat",
        "stopped": "webapp.sandboxes.services.host_heartbeat",  # gone from the host's report
    },
    "sandboxes.Lease": {
        "active": "webapp.sandboxes.services.sandbox_lease",  # and lease_acquire
        "released": "webapp.sandboxes.services.lease_end",  # and host_heartbeat
        "expired": "webapp.sandboxes.services.leases_expire",
        "broken": "webapp.sandboxes.services.host_heartbeat",  # the host lost the sandbox under it
    },
}
