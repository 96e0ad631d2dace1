"""``manage.py bench_demo``: the live demo (``make run``) headless, and its quality figures
(#19): utilization of healthy GPUs, fragmented free GPUs, eviction ratio per queue, idle
GPUs by cause, jobs waiting. ``bench.demo`` runs it; see its docstring.

By default on a scratch database created next to the configured one
(``<name>_bench_demo``, on the same PostgreSQL server, dropped afterwards; ``--keep-db``
keeps it to look at, e.g. with ``DATABASE_URL=.../<name>_bench_demo make run``'s web
server), so a running portal's data is never touched. ``--here`` uses the configured
database itself, which must hold no nodes and no jobs (the tests).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test.utils import override_settings

from bench.cli import add_output_arguments, write_result
from bench.demo import DEFAULT_START, DemoRun, QuotaPolicyRefused, human, quota_policy, run_demo

# Live events go nowhere: no web server listens, and a portal running next to this one on
# the same Redis must not hear about jobs of another database.
QUIET_LAYER = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def _start(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError as err:
        raise CommandError(f"--start: not an ISO 8601 time: {text!r}") from err
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Run the live demo (make run: the seeded 10,000-GPU simulated cluster, the demo "
        "workload, the scheduling cycle, sweeps, quota activation and metrics rollups "
        "through PostgreSQL) headless for --cluster-hours of cluster time on a paused, "
        "stepped clock, and print its quality figures."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--cluster-hours",
            type=float,
            default=60.0,
            help="cluster time to run (default 60: make run's hour at 60x)",
        )
        parser.add_argument(
            "--step-seconds",
            type=float,
            default=120.0,
            help="cluster seconds between scheduling cycles (default 120: make run's 2 s at "
            "60x; 300 is the 5 s of runs before #19)",
        )
        parser.add_argument(
            "--warmup-hours",
            type=float,
            default=2.0,
            help="cluster hours left out of the figures (the empty start)",
        )
        parser.add_argument("--nodes", type=int, default=1250, help="8-GPU nodes (seed_demo)")
        parser.add_argument("--nodes-per-rack", type=int, default=32)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--start",
            default=DEFAULT_START.isoformat(),
            help="cluster time of the start (ISO 8601, UTC)",
        )
        parser.add_argument(
            "--keep-db", action="store_true", help="keep the scratch database afterwards"
        )
        parser.add_argument(
            "--here", action="store_true", help="use the configured database (it must be empty)"
        )
        parser.add_argument(
            "--quota-policy",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="the admins' quota policy for the run, a field as the Django admin edits it "
            "(repeatable; e.g. borrow_cap=false, preempt_after_minutes=180)",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress lines")
        add_output_arguments(parser)  # fmt: skip

    def handle(self, *args, **opts) -> None:
        if settings.SCHEDULING_BACKEND != "simulator":
            raise CommandError("the demo runs on the simulator (SCHEDULING_BACKEND=simulator)")
        if not 0 < opts["cluster_hours"] <= 24 * 30:
            raise CommandError("--cluster-hours must be more than 0 and at most 720")
        if not 10 <= opts["step_seconds"] <= 3600:
            raise CommandError("--step-seconds must be between 10 and 3600")
        if not 0 <= opts["warmup_hours"] < opts["cluster_hours"]:
            raise CommandError("--warmup-hours must be at least 0 and less than --cluster-hours")
        if not 1 <= opts["nodes"] <= 5000:
            raise CommandError("--nodes must be between 1 and 5000")
        try:
            policy = quota_policy(opts["quota_policy"])
        except ValueError as e:
            raise CommandError(str(e)) from None
        run = DemoRun(
            cluster_hours=opts["cluster_hours"], step_s=opts["step_seconds"],
            warmup_hours=opts["warmup_hours"], nodes=opts["nodes"],
            nodes_per_rack=opts["nodes_per_rack"], seed=opts["seed"],
            start=_start(opts["start"]), quota_policy=policy,
        )  # fmt: skip
        progress = None if opts["quiet"] else (lambda line: self.stderr.write(line))
        with override_settings(CHANNEL_LAYERS=QUIET_LAYER):
            try:
                if opts["here"]:
                    result = self._here(run, progress)
                else:
                    result = self._scratch(run, progress, opts["keep_db"])
            except QuotaPolicyRefused as e:
                raise CommandError(str(e)) from None
        write_result(self, result, opts["json"], human)

    def _here(self, run: DemoRun, progress) -> dict:
        from scheduling.models import Job, Node

        if Node.objects.exists() or Job.objects.exists():
            raise CommandError("--here needs an empty database (no nodes, no jobs)")
        return run_demo(run, progress)

    def _scratch(self, run: DemoRun, progress, keep: bool) -> dict:
        """Create ``<name>_bench_demo``, migrate it, run there, then drop it (unless kept)."""
        db = connection.settings_dict
        original, test_settings = db["NAME"], dict(db.get("TEST") or {})
        name = f"{original}_bench_demo"
        db["TEST"] = {**test_settings, "NAME": name}
        try:
            # The connection pool was opened on this database: closed, the next connection
            # is made to the scratch one (Django's test runner creates its database before
            # any pool exists; destroy_test_db closes the pool again).
            connection.close()
            connection.close_pool()
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
            if progress:
                progress(f"scratch database {name} created and migrated")
            try:
                return run_demo(run, progress)
            finally:
                connection.creation.destroy_test_db(original, verbosity=0, keepdb=keep)
                if progress:
                    progress(f"scratch database {name} " + ("kept" if keep else "dropped"))
        finally:
            db["TEST"] = test_settings
