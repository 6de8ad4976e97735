"""`manage.py replay_events`: put failed (or given, or pending) events back in the queue."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest import actions
from ingest.models import EventState, RawEvent


class Command(BaseCommand):
    help = "Replay failed OpenLineage events (or the given ids, or all pending ones)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="*", type=int, help="event ids (default: every failed)")
        parser.add_argument(
            "--pending", action="store_true", help="replay pending events instead of failed ones"
        )
        parser.add_argument(
            "--inline", action="store_true", help="normalise here instead of queueing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[int] = options["ids"]
        state = EventState.PENDING if options["pending"] else EventState.FAILED
        if ids:
            unknown = set(ids) - set(
                RawEvent.objects.filter(pk__in=ids).values_list("pk", flat=True)
            )
            if unknown:
                raise CommandError(f"No such event: {', '.join(map(str, sorted(unknown)))}")
        inline = options["inline"] or settings.CELERY_TASK_ALWAYS_EAGER
        if inline:
            chosen = (
                RawEvent.objects.filter(state=state)
                if not ids
                else RawEvent.objects.filter(pk__in=ids).exclude(state=EventState.PROCESSING)
            )
            chosen_ids = sorted(chosen.values_list("pk", flat=True))
            RawEvent.objects.filter(pk__in=chosen_ids).update(state=EventState.PENDING, attempts=0)
            done = failed = 0
            for batch in actions.chunked(chosen_ids, 500):
                result = actions.process_events(batch)
                done += len(result.done)
                failed += len(result.failed) + len(result.retry)
            self.stdout.write(self.style.SUCCESS(f"{done} normalised, {failed} failed again"))
            return
        count = actions.replay(ids or None, state=None if ids else state)
        self.stdout.write(self.style.SUCCESS(f"{count} events queued again"))
