"""Troubleshooting guides for on-call (V4), as data: symptom, likely causes, first actions.

The on-call console shows the guide of each alert next to it (``guide_for_alert``) and
all of them in one reference list. Guides speak the portal's own words (pending reason
codes of API.md, the rack map's letters, the buttons of the node page) so that the
first actions can be done from the console.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Guide:
    """One symptom. ``alert_kinds`` are the ``Alert.Kind`` values it explains."""

    slug: str
    title: str
    symptom: str
    causes: tuple[str, ...]
    first_actions: tuple[str, ...]
    alert_kinds: tuple[str, ...] = ()


GUIDES: tuple[Guide, ...] = (
    Guide(
        slug="pending-for-hours",
        title="Pending for hours",
        symptom=(
            "A job, or many jobs of one queue, have been pending for hours "
            "(alert “pending too long”, raised after 6 h of cluster time)."
        ),
        causes=(
            "QUOTA_EXCEEDED: the queue or its line already holds its quota; the job waits "
            "for its own line's jobs to finish, not for free GPUs.",
            "PRIORITY: higher-tier work is ahead of it, or has reserved the GPUs it needs "
            "(backfill only lets shorter jobs through).",
            "NODES_UNAVAILABLE: enough GPUs exist only if cordoned, draining or unhealthy "
            "nodes are counted — capacity is out of the pool.",
            "TOPOLOGY: enough GPUs are free but scattered over partly used nodes or racks "
            "(see fragmentation on the dashboard).",
            "NEVER_FITS: it asks for something no healthy node has (GPU memory, RDMA, more "
            "than 8 GPUs per node).",
            "HELD: its owner, their team lead or an admin put it on hold (or suspended it "
            "while it ran); it waits until released, and its wait counts from the release.",
            "QUEUE_TIME_LIMIT: its time limit is longer than its queue now lets a run last "
            "(an admin lowered the queue's bound after it was submitted); it waits until its "
            "limit is lowered (its page, gpuctl time-limit) or the queue's raised.",
            "DEPENDENCY: it was submitted to start after other jobs, and waits for them to "
            "succeed; it is not in the queue yet (its owner's pipeline, not the cluster).",
            "BEGIN_TIME: its owner asked it not to start before a time (Slurm's --begin); it "
            "queues from then, and its wait counts from then.",
            "ARRAY_LIMIT: a task of a job array whose owner bounded how many tasks run at "
            "once (0-99%10); it starts as the array's running tasks end.",
            "DEMOTED: preempted more than 3 times; it was moved to the back of the line.",
            "LAUNCH_RETRY: its turn came, but the cluster backend failed to start it "
            "(a transient error); the loop retries with backoff, at most 5 minutes apart.",
        ),
        first_actions=(
            "Open one of the waiting jobs: its pending reason gives the code and the numbers "
            "(what it waits for, what would make it start, its estimated start).",
            "On the dashboard, check “Pending by reason”: one dominant code points at one "
            "cause for the whole queue.",
            "NODES_UNAVAILABLE: look for C/D/U/X cells on the rack map; uncordon nodes that "
            "are repaired (with a reason).",
            "QUOTA_EXCEEDED: nothing is broken; the line's team lead can file a quota request, "
            "or the owner can use a queue with headroom.",
            "NEVER_FITS: tell the owner to resize the request (the submit form's estimator "
            "shows what the model needs).",
            "LAUNCH_RETRY for long: the backend keeps refusing launches; the job's numbers give "
            "its failed attempts and the backend's error (see “Backend errors”).",
        ),
        alert_kinds=("pending_too_long",),
    ),
    Guide(
        slug="killed-half-way",
        title="A job was killed half-way",
        symptom=(
            "A running job stopped before it finished: it is pending again, retrying, or "
            "failed, and its owner reports lost progress."
        ),
        causes=(
            "Graceful preemption by higher-tier work: it was asked to checkpoint, then "
            "requeued with its progress kept (timeline: “preempted”).",
            "Its node turned unhealthy (GPU errors, RDMA, node down): the node was isolated "
            "and the job restarted elsewhere from its last checkpoint (timeline: “retried”).",
            "A drain by on-call moved it off its node (timeline and node audit log).",
            "Retries exhausted (max_retries) after repeated failures: it is failed, with the "
            "reason in its timeline.",
            "Progress really lost: no checkpoint path, a node-local path, or a checkpoint "
            "interval far longer than the time it ran.",
        ),
        first_actions=(
            "Open the job: its timeline says which of these happened and when.",
            "If it was a node problem, open that node (its placement links to it): health "
            "detail and audit log say what the node did.",
            "If the same job keeps failing on different nodes, the job itself is the problem "
            "(check its failure reason); if different jobs fail on one node, cordon the node.",
            "Advise the owner: shared-storage checkpoint path and an interval matched to "
            "the run length (1 h for pre-training, 2 h for small runs).",
        ),
    ),
    Guide(
        slug="node-idle-unschedulable",
        title="Node idle but unschedulable",
        symptom=("A node runs nothing (0 GPUs used) while jobs wait, and no new work lands on it."),
        causes=(
            "Cordoned or draining and never returned after maintenance (rack map C or D; the "
            "node page shows who did it and why).",
            "Isolated as unhealthy by the health sweep (U; the health detail says what the "
            "node reported).",
            "Its GPUs are held by residual processes of finished jobs (R): busy, by nobody.",
            "It does not match what waits: no RDMA for multi-node jobs, a GPU model or memory "
            "the waiting jobs exclude, or an inference node that “avoid inference” jobs skip.",
            "An uncordon was requested but the backend has not confirmed it yet (next cycle).",
        ),
        first_actions=(
            "Open the node: state, reason, health and the audit log of who changed it.",
            "If it is repaired and healthy, uncordon it with a reason.",
            "If GPUs are held by residual processes, press “Clean residual processes”.",
            "If it is ready and healthy, open a waiting job: a TOPOLOGY or INSUFFICIENT_GPUS "
            "verdict names the nodes it considered.",
        ),
    ),
    Guide(
        slug="eviction-loop",
        title="Urgent work keeps evicting the same jobs",
        symptom=(
            "Alert “eviction ratio” for a queue: a large share of the GPU time it was given "
            "was taken back by preemption in the last 24 h; the same jobs are preempted "
            "again and again."
        ),
        causes=(
            "The queue runs mostly on borrowed or unguaranteed capacity, so every burst of "
            "urgent or core work lands on it first.",
            "The line's urgent queue is bursty and its line has no headroom left.",
            "Long checkpoint intervals turn each eviction into lost work, so the ratio hurts "
            "more than it should.",
        ),
        first_actions=(
            "Dashboard, “Eviction ratio per queue”: which queues are above the alert line and "
            "since when.",
            "Jobs preempted more than 3 times are DEMOTED and protected from further "
            "preemption; check their owners were told.",
            "Suggest a guarantee for the queue: its team lead files a quota request for a "
            "guarantee (the admin sees the impact before approving).",
            "Ask the urgent queue's users whether the work is really urgent-tier, and the "
            "evicted jobs' owners to shorten their checkpoint interval.",
        ),
        alert_kinds=("eviction_ratio",),
    ),
    Guide(
        slug="scattered-placement",
        title="Slow training from scattered placement",
        symptom=(
            "A multi-node job trains slower than usual; its placement spans several racks, "
            "partly used nodes or nodes without RDMA."
        ),
        causes=(
            "Fragmentation: free GPUs are spread over partly used nodes (dashboard "
            "“Fragmentation”), so no whole nodes in one rack were free when it started.",
            "The job did not ask for RDMA or whole nodes, so the scheduler was allowed to "
            "split it (e.g. 6+2 GPUs).",
            "A rack of the nodes it prefers is partly cordoned or unhealthy.",
        ),
        first_actions=(
            "Open the job: its placement lists each node and GPU; count the racks.",
            "Advise resubmitting with GPUs per node = 8, RDMA on, and exclusive node when "
            "the job is communication-bound.",
            "If fragmentation stays high, drain one partly used node of a rack to free whole "
            "nodes (check its blast radius first).",
        ),
    ),
    Guide(
        slug="frequent-quota-alerts",
        title="Frequent quota alerts",
        symptom=(
            "Alert “quota near limit” for a business line keeps coming back: the line holds "
            "95% or more of its GPU quota."
        ),
        causes=(
            "The line simply uses what it pays for: a full quota is healthy when its jobs "
            "are not waiting long.",
            "The quota is too small for the line's steady demand: pending jobs with "
            "QUOTA_EXCEEDED grow.",
            "A few very large jobs hold most of the quota.",
        ),
        first_actions=(
            "Dashboard, “GPUs per line against quota and guarantee”: used against quota now, "
            "and whether pending GPUs pile up.",
            "If it is expected, acknowledge and resolve; the alert is informational and does "
            "not page.",
            "If the line's jobs wait on QUOTA_EXCEEDED for long, its team lead files a quota "
            "request; admins see whether it fits before approving.",
        ),
        alert_kinds=("quota_near_limit",),
    ),
    Guide(
        slug="residual-processes",
        title="Residual processes hold GPUs",
        symptom=(
            "Alert “residual process”: GPU memory on a node was held by processes of jobs "
            "that had finished (rack map R: busy, by nobody)."
        ),
        causes=(
            "Processes that outlived their job: hung data loaders, NCCL watchdogs, orphaned "
            "containers, a launcher that did not reap its children.",
            "The same image or user leaving them behind on every run.",
        ),
        first_actions=(
            "The loop kills them automatically on every cycle and health sweep; the alert "
            "says they were killed and the GPUs returned.",
            "Open the node: residual GPUs should be back to 0. If not, press “Clean residual "
            "processes” to run a sweep now.",
            "If they come back on the same node, cordon it with a reason and file a ticket; "
            "if they follow one user's jobs, tell that user.",
        ),
        alert_kinds=("residual_process",),
    ),
    Guide(
        slug="unhealthy-node",
        title="Unhealthy node",
        symptom=(
            "Alert “node unhealthy” (critical): a node reported GPU errors, a degraded RDMA "
            "link or stopped answering (rack map U or X)."
        ),
        causes=(
            "GPU failure (uncorrectable ECC / Xid errors) or a broken driver.",
            "RDMA degraded: packet loss on the fabric, a bad cable or switch port.",
            "Node down: no heartbeat (power, kernel panic, network).",
            "Several nodes of one rack at once: a rack-level cause (power, top-of-rack switch).",
        ),
        first_actions=(
            "Nothing to do for the jobs: the loop isolated the node and restarted its jobs "
            "elsewhere from their last checkpoint.",
            "Open the node: health detail, and the audit log of the automatic isolation.",
            "Open a hardware ticket; keep the node out of the pool until it is repaired.",
            "After repair, uncordon it with a reason (on the simulator, uncordon also repairs "
            "it); watch the next cycles for a relapse.",
        ),
        alert_kinds=("node_unhealthy",),
    ),
    Guide(
        slug="backend-errors",
        title="Backend errors",
        symptom="Alert “backend error”: the cluster backend refused or did not answer a request.",
        causes=(
            "Transient: the backend (simulator, Slurm, Kubernetes) was briefly unreachable; "
            "the loop retries next cycle (a job it could not start waits with the reason "
            "LAUNCH_RETRY, the error and its next attempt, and retries with backoff).",
            "Permanent: the request itself was refused (bad partition, unknown node); the "
            "job is failed with the backend's message.",
        ),
        first_actions=(
            "Check the latest scheduling cycles: their errors say which call failed and "
            "whether it was transient or permanent.",
            "If it persists, check the backend's own services (slurmctld, the Kubernetes API).",
        ),
        alert_kinds=("backend_error",),
    ),
    Guide(
        slug="directory-sweep-held",
        title="Directory sweep held",
        symptom=(
            "Alert “directory sweep”: the portal stopped following the directory. People "
            "deleted from it keep their account, sessions and API tokens, and group changes "
            "wait for a sign-in, until a sweep runs through."
        ),
        causes=(
            "“directory unavailable”: the LDAP server is down or unreachable from the portal, "
            "or refused the service account's bind (a rotated password), or the user search "
            "base does not exist. Directory sign-in fails too.",
            "“sweep bound”: the sweep would have deactivated more than LDAP_SWEEP_MAX_SHARE of "
            "the directory accounts at once, or taken a role or a line from more than that "
            "share, so it wrote nothing: a user search base or filter that finds nobody, a "
            "group search base with no group in it, or a real mass departure.",
        ),
        first_actions=(
            "Run `manage.py sync_directory --dry-run`: it lists whom the sweep would "
            "deactivate, and from whom it would take a role or a line, and changes nothing.",
            "For an outage or a refused bind, check the directory and LDAP_BIND_DN and "
            "LDAP_BIND_PASSWORD with its owners; the next sweep (every LDAP_SWEEP_SECONDS) resolves the alert.",
            "If the listed people really left, raise LDAP_SWEEP_MAX_SHARE for one run of "
            "`manage.py sync_directory`, then set it back.",
        ),
        alert_kinds=("directory_sweep",),
    ),
    Guide(
        slug="provider-sweep-held",
        title="Single sign-on sweep held",
        symptom=(
            "Alert “provider sweep”: the portal stopped asking the OpenID Connect provider "
            "about the people who sign in through it. People deleted or disabled there keep "
            "their account and API tokens, and people taken out of groups there the role and "
            "lines those gave, until a sweep runs through (or until they open a page: the "
            "session check still signs them out, or applies their groups)."
        ),
        causes=(
            "“provider unavailable”: the provider's discovery document or token endpoint "
            "did not answer the portal, or refused its client (a rotated client secret: "
            "OIDC_CLIENT_SECRET). Sign-in fails too. Or its user-info endpoint gave no "
            "claims: those people's groups were not applied.",
            "“sweep bound”: the sweep would have deactivated more than OIDC_SWEEP_MAX_SHARE "
            "of the accounts (refused refresh tokens, people in none of the required "
            "groups), or taken a role or a line from more than that share, so it changed "
            "nobody: a provider that lost its token store or revoked every grant, an "
            "offline-session limit that expired them, a provider that stopped sending the "
            "groups claim, or a real mass departure or reorganisation.",
        ),
        first_actions=(
            "Run `manage.py sweep_provider --dry-run`: it lists whom the sweep would "
            "deactivate or take a role or a line from, and changes nobody.",
            "For an outage or a refused client, check the provider and the portal's client "
            "settings with its owners; the next sweep (every OIDC_SWEEP_SECONDS) resolves "
            "the alert.",
            "If the listed changes are real, raise OIDC_SWEEP_MAX_SHARE for one run of "
            "`manage.py sweep_provider`, then set it back. If the provider lost its tokens, "
            "the people signing in again store new ones; the ones refused are dropped.",
        ),
        alert_kinds=("provider_sweep",),
    ),
)

GUIDE_BY_SLUG: dict[str, Guide] = {g.slug: g for g in GUIDES}
GUIDE_BY_ALERT_KIND: dict[str, Guide] = {k: g for g in GUIDES for k in g.alert_kinds}


def guide_for_alert(kind: str) -> Guide | None:
    """The guide explaining an alert of this kind (None for kinds without one)."""
    return GUIDE_BY_ALERT_KIND.get(kind)
