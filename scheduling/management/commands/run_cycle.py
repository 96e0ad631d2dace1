import json

from django.core.management.base import BaseCommand

from scheduling.loop import cycle_payload
from scheduling.tasks import CLUSTER_LOCK, lock_ttl


class Command(BaseCommand):
    help = "Run one scheduling cycle now (observe, reconcile, plan, apply) and print its summary."

    def handle(self, *args, **options) -> None:
        from portal.locks import single_flight
        from scheduling.loop import run_cycle

        with single_flight(CLUSTER_LOCK, lock_ttl()) as held:
            if not held:
                self.stderr.write("another cycle is running; try again in a few seconds")
                raise SystemExit(1)
            record = run_cycle()
        self.stdout.write(json.dumps(cycle_payload(record), indent=2))
