import json

from django.core.management.base import BaseCommand, CommandError

from scheduling.cluster_lock import ClusterBusy
from scheduling.cycle import cycle_payload, run_cycle


class Command(BaseCommand):
    help = "Run one scheduling cycle now (observe, reconcile, plan, apply) and print its summary."

    def handle(self, *args, **options) -> None:
        try:
            record = run_cycle(wait_s=30)
        except ClusterBusy as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(cycle_payload(record), indent=2))
