"""manage.py tasks_verify: run oracles and do-nothing on real sandboxes; publish the tasks that pass."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.catalog.models import Task, VerificationStatus


class Command(BaseCommand):
    help = (
        "Publish tasks whose oracle scores 1 and do-nothing 0 on every run (needs a live sandbox host). "
        "--enqueue hands the work to the checks workers (queue checks) instead of running it here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--suite", help="only this suite's tasks")
        parser.add_argument("--task", action="append", default=[], help="only this task (repeatable)")
        parser.add_argument("--runs", type=int, default=2, help="runs of each policy (default 2)")
        parser.add_argument(
            "--unverified", action="store_true", help="only tasks whose check never reached a verdict"
        )
        parser.add_argument("--enqueue", action="store_true", help="run on the Celery checks workers")

    def handle(self, *args: Any, **opts: Any) -> None:
        from webapp.rollouts.verification import VerificationDeferred, task_verify, verification_request

        tasks = Task.objects.order_by("slug")
        if opts["suite"]:
            tasks = tasks.filter(suites__slug=opts["suite"])
        if opts["task"]:
            tasks = tasks.filter(slug__in=opts["task"])
        if opts["unverified"]:
            # Never checked, or a check that found no sandbox (or was lost with a restarted broker).
            done = (VerificationStatus.PASSED, VerificationStatus.FAILED)
            tasks = tasks.filter(pk__in=[t.pk for t in tasks if t.verification_status not in done])
        if not tasks.exists():
            if opts["unverified"]:
                self.stdout.write("every task has been checked already")
                return
            raise CommandError("no task matches")
        if not 1 <= opts["runs"] <= 10:
            raise CommandError("--runs must be between 1 and 10")
        passed = failed = deferred = 0
        for task in tasks:
            if opts["enqueue"]:
                verification_request(task=task, runs=opts["runs"])
                continue
            try:
                result = task_verify(task=task, runs=opts["runs"])
            except VerificationDeferred as exc:
                deferred += 1
                self.stdout.write(f"{task.slug}: not checked ({exc})")
                continue
            passed += result["ok"]
            failed += not result["ok"]
            status = "published" if result["ok"] else "NOT published"
            why = result["reason"] or f"oracle {result['oracle']} noop {result['noop']}"
            self.stdout.write(f"{task.slug}: {status} ({why}, {result.get('seconds', 0)} s)")
        if opts["enqueue"]:
            self.stdout.write(f"enqueued {tasks.count()} verifications")
        else:
            self.stdout.write(f"{passed} published, {failed} not, {deferred} not checked (no sandbox)")
