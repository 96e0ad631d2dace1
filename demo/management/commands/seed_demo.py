"""Seed demo business lines, queues, users and a simulated cluster (idempotent)."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from core import clock
from core.models import LineMembership, Profile, Role
from demo.history import HISTORY, seed_history
from demo.workload import WORKLOAD_USER  # the demo's generator submits as it: in every line
from quotas.models import BusinessLine, Queue, QuotaPolicy, Tier
from scheduling.array_services import submit_array
from scheduling.models import Allocation, ClusterSettings, Job, Node
from scheduling.services import JobRequest, submit_job
from scheduling.simcore.cluster import build_demo_cluster

# (name, display name, share of the cluster's GPUs as quota, guarantee share of the quota)
# The lines own the whole cluster, as a platform team allocates it (#19): with 5% owned by
# nobody, only borrowers could ever use it, and the demo's non-preemptible work over its
# line's quota waited beside ~500 idle GPUs (docs/benchmarks.md, "Live demo quality").
LINES = (
    ("search-rec", "Search & Recommendation", 0.275, 0.40),
    ("llm", "Large language models", 0.45, 0.40),
    ("multimodal", "Multimodal", 0.275, 0.40),
)
# The busy demo's patience before preempting (QuotaPolicy; #19, docs/engine.md "Preemption"):
# minutes before a job within its quota reclaims borrowed GPUs / an urgent job preempts.
DEMO_PATIENCE_MINUTES = 15
DEMO_URGENT_PATIENCE_MINUTES = 10
# (suffix, nature, tier, queue quota share of the line's quota or None, share of line guarantee)
QUEUES = (
    ("urgent", Queue.Nature.URGENT_FIX, Tier.URGENT, None, 0.0),
    ("core", Queue.Nature.CORE_TRAINING, Tier.CORE, None, 0.50),
    ("finetune", Queue.Nature.FINE_TUNING, Tier.FINETUNE, 0.40, 0.25),
    ("experiment", Queue.Nature.EXPERIMENTS, Tier.EXPERIMENT, 0.30, 0.0),
)
# (username, role, line, is_lead)
USERS = (
    ("admin", Role.ADMIN, None, False),
    ("oncall", Role.ONCALL, None, False),
    ("lead", Role.TEAM_LEAD, "llm", True),
    ("researcher", Role.RESEARCHER, "llm", False),
    ("researcher2", Role.RESEARCHER, "search-rec", False),
)
# A few jobs of the researchers' own on the busy demo, so that signing in as one shows
# jobs of theirs (the generator submits as ``workload``): (username, queue suffix, name,
# model, GPUs, true run time in minutes, job array spec or ""). Sizes above the line's
# quota are left out.
OWN_JOBS = (
    ("researcher", "finetune", "llama-7b-sft", "llama-7b", 8, 240, ""),
    ("researcher", "experiment", "bert-eval-sweep", "bert-large", 1, 40, "0-15%4"),
    ("researcher", "core", "llama-70b-pretrain", "llama-70b", 64, 24 * 60, ""),
    ("researcher2", "experiment", "two-tower-retrain", "two-tower", 4, 90, ""),
)


class Command(BaseCommand):
    help = (
        "Create demo business lines, queues, quotas, users and a simulated cluster "
        "(default 1,250 nodes x 8 GPUs). Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1250, help="number of 8-GPU nodes")
        parser.add_argument("--nodes-per-rack", type=int, default=32)
        parser.add_argument("--no-workload", action="store_true", help="no demo job generator")
        parser.add_argument(
            "--uniform", action="store_true", help="one GPU model and memory, RDMA everywhere"
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--own-jobs", action="store_true",
            help="also submit a few jobs as the demo researchers (OWN_JOBS), so signing in as "
            "one shows jobs of theirs (make run does); not with --no-workload",
        )  # fmt: skip
        parser.add_argument(
            "--no-history", action="store_true",
            help="no seeded demo history of metrics samples (demo/history.py); "
            "--no-workload implies it",
        )  # fmt: skip

    def handle(self, *args, **opts) -> None:
        if not 1 <= opts["nodes"] <= 5000:
            raise CommandError("--nodes must be between 1 and 5000")
        if not 1 <= opts["nodes_per_rack"] <= 256:
            raise CommandError("--nodes-per-rack must be between 1 and 256")
        # One reading of the cluster clock for every row seeded (not one query per node).
        with transaction.atomic(), clock.pinned():
            gpus = self._seed_nodes(opts)
            self._seed_lines(gpus)
            created = self._seed_users()
            if not opts["no_workload"]:
                self._seed_patience()
                if opts["own_jobs"]:
                    self._seed_own_jobs()
            settings = ClusterSettings.load()
            settings.workload_enabled = not opts["no_workload"]
            settings.seed = opts["seed"]
            settings.save()
            # A fresh live demo gets a seeded (flagged, not measured) past for its charts.
            history = 0
            if not (opts["no_workload"] or opts["no_history"]):
                history = seed_history(clock.now(), gpus, seed=opts["seed"])
        self.stdout.write(
            f"demo ready: {Node.objects.count()} nodes, {gpus} GPUs, "
            f"{BusinessLine.objects.count()} lines, {Queue.objects.count()} queues, "
            f"workload {'on' if not opts['no_workload'] else 'off'}"
        )
        if history:
            self.stdout.write(
                f"seeded demo history: {history} metrics samples over the last "
                f"{HISTORY.days} days of cluster time, flagged as seeded (not measured)"
            )
        for username, password in created:
            self.stdout.write(f"created user {username} with password {password}")

    def _seed_patience(self) -> None:
        """The busy demo's quota policy waits before preempting (#19): capacity that frees
        within the patience needs no eviction. Its patience is blind (whatever the
        predictions), as measured since session 8; the portal's own default waits 25
        minutes before a reclaim only for room predicted to free within them, and lets
        urgent work preempt at once."""
        policy = QuotaPolicy.load()
        policy.preempt_after_minutes = DEMO_PATIENCE_MINUTES
        policy.urgent_preempt_after_minutes = DEMO_URGENT_PATIENCE_MINUTES
        policy.predictive_patience = False
        policy.save(
            update_fields=[
                "preempt_after_minutes",
                "urgent_preempt_after_minutes",
                "predictive_patience",
            ]
        )

    def _seed_own_jobs(self) -> None:
        """Submit ``OWN_JOBS`` through ``submit_job`` or ``submit_array`` (the rules of every
        submission); a job its owner already has by that name is not submitted again."""
        user_model = get_user_model()
        for username, suffix, name, model, gpus, minutes, array in OWN_JOBS:
            user = user_model.objects.get(username=username)
            line = user.memberships.get().business_line
            if gpus > line.quota_gpus or Job.objects.filter(owner=user, name=name).exists():
                continue
            request = JobRequest(
                name=name, queue=f"{line.name}-{suffix}", gpus=gpus, model_name=model,
                checkpoint_path=f"nfs://checkpoints/{username}/{name}",
                sim_duration_minutes=minutes,
            )  # fmt: skip
            if array:
                submit_array(user, request, array)
            else:
                submit_job(user, request)

    def _seed_nodes(self, opts: dict) -> int:
        layout = build_demo_cluster(
            nodes=opts["nodes"],
            nodes_per_rack=opts["nodes_per_rack"],
            uniform=opts["uniform"],
            seed=opts["seed"],
        )
        wanted = {n.name for n in layout}
        stale = Node.objects.exclude(name__in=wanted)
        if Allocation.objects.filter(node__in=stale).exists():
            raise CommandError("cannot reshape the cluster while jobs run on nodes it would remove")
        stale.delete()
        existing = {n.name: n for n in Node.objects.all()}
        fields = ["rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total", "rdma", "inference"]
        to_create, to_update = [], []
        for sim in layout:
            values = {f: getattr(sim, f) for f in fields}
            node = existing.get(sim.name)
            if node is None:
                to_create.append(Node(name=sim.name, **values))
            elif any(getattr(node, f) != v for f, v in values.items()):
                for f, v in values.items():
                    setattr(node, f, v)
                to_update.append(node)
        Node.objects.bulk_create(to_create, batch_size=500)
        Node.objects.bulk_update(to_update, fields, batch_size=500)
        return sum(n.gpus_total for n in layout)

    def _seed_lines(self, cluster_gpus: int) -> None:
        for name, display, share, guarantee_share in LINES:
            quota = max(1, int(cluster_gpus * share))
            guarantee = int(quota * guarantee_share)
            line, _ = BusinessLine.objects.get_or_create(
                name=name,
                defaults={
                    "display_name": display,
                    "quota_gpus": quota,
                    "guarantee_gpus": guarantee,
                },
            )
            if (line.quota_gpus, line.guarantee_gpus) != (quota, guarantee):
                # The demo contract follows the demo cluster's size.
                line.quota_gpus, line.guarantee_gpus = quota, guarantee
                line.save(update_fields=["quota_gpus", "guarantee_gpus"])
            for suffix, nature, tier, q_share, g_share in QUEUES:
                values = {
                    "business_line": line,
                    "nature": nature,
                    "tier": tier,
                    "quota_gpus": None if q_share is None else int(quota * q_share),
                    "guarantee_gpus": int(guarantee * g_share),
                    "preempts_tiers": [],
                }
                Queue.objects.update_or_create(name=f"{name}-{suffix}", defaults=values)

    def _seed_users(self) -> list[tuple[str, str]]:
        user_model = get_user_model()
        env_password = os.environ.get("DEMO_PASSWORD", "")
        generated = secrets.token_urlsafe(12)
        created: list[tuple[str, str]] = []
        for username, role, line_name, is_lead in USERS:
            user = user_model.objects.filter(username=username).first()
            if user is None:
                user = user_model(username=username, email=f"{username}@example.org")
                user.set_password(env_password or generated)
                created.append((username, env_password or generated))
            elif env_password and not user.check_password(env_password):
                user.set_password(env_password)
            user.is_staff = user.is_superuser = role == Role.ADMIN
            user.save()
            Profile.objects.update_or_create(user=user, defaults={"role": role})
            if line_name:
                LineMembership.objects.update_or_create(
                    user=user,
                    business_line=BusinessLine.objects.get(name=line_name),
                    defaults={"is_lead": is_lead},
                )
        bot = user_model.objects.filter(username=WORKLOAD_USER).first()
        if bot is None:
            bot = user_model(username=WORKLOAD_USER, email="workload@example.org")
            bot.set_unusable_password()
            bot.save()
        Profile.objects.update_or_create(user=bot, defaults={"role": Role.RESEARCHER})
        for line in BusinessLine.objects.all():
            LineMembership.objects.get_or_create(user=bot, business_line=line)
        if env_password:
            return [(u, "(DEMO_PASSWORD)") for u, _ in created]
        return created
