import json

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Time scheduling cycles at scale: the engine alone (plan + check_plan on a random "
        "snapshot), or with --with-db a full cycle through the database (rolled back after)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--gpus", type=int, default=10_000)
        parser.add_argument("--pending", type=int, default=5_000)
        parser.add_argument("--running", type=int, default=2_000)
        parser.add_argument("--runs", type=int, default=7)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--with-db", action="store_true")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o) -> None:
        for name in ("gpus", "pending", "running", "runs"):
            if not 0 <= o[name] <= 200_000 or (name in ("gpus", "runs") and o[name] < 1):
                raise CommandError(f"--{name} out of range")
        if o["with_db"]:
            from scheduling.bench_db import run_db_bench

            try:
                result = run_db_bench(o["gpus"], o["pending"], o["running"], o["runs"], o["seed"])
            except RuntimeError as exc:
                raise CommandError(str(exc)) from exc
        else:
            from scheduling.engine.bench import run_bench

            result = run_bench(o["gpus"], o["pending"], o["running"], o["runs"], o["seed"])
        if o["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))
        else:
            for key, value in sorted(result.items()):
                self.stdout.write(f"{key:>24}: {value}")
