"""Pending reasons (V1) built directly: exact words, numbers and remedies."""

from __future__ import annotations

import pytest

from scheduling.engine import Code, explain

from .helpers import NOW, pjob

SHAPE = "needs 8 GPUs on one node"


@pytest.mark.parametrize(
    "t, text",
    [(None, "unknown"), (0, "1970-01-01 00:00 UTC"), (NOW, "1970-01-12 13:46 UTC")],
)
def test_when(t, text):
    assert explain.when(t) == text


@pytest.mark.parametrize(
    "t, text",
    [(0, "1970-01-01T00:00:00Z"), (NOW + 0.9, "1970-01-12T13:46:40Z"),
     (1796085057.451252, "2026-12-01T00:30:57Z")],
)  # fmt: skip
def test_iso_is_utc_to_the_second(t, text):
    assert explain.iso(t) == text


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min"), (3599, "59 min"), (3600, "1 h"),
     (7800, "2 h 10 min"), (86400, "24 h"), (47 * 3600 + 60, "47 h 1 min"),
     (172800, "2 d"), (180000, "2 d 2 h"), (-5, "0 s")],
)  # fmt: skip
def test_duration(seconds, text):
    assert explain.duration(seconds) == text


@pytest.mark.parametrize(
    "n, noun, text",
    [(1, "GPU", "1 GPU"), (0, "GPU", "0 GPUs"), (8, "GPU", "8 GPUs"),
     (1, "preemptible job", "1 preemptible job"), (3, "preemptible job", "3 preemptible jobs")],
)  # fmt: skip
def test_count_says_one_in_the_singular(n, noun, text):
    assert explain.count(n, noun) == text


@pytest.mark.parametrize(
    "kw, text",
    [
        ({}, ""),
        ({"rdma": True}, " (RDMA)"),
        ({"gpu_memory_gb": 80, "gpu_model": "H100", "rdma": True}, " (80 GB, H100, RDMA)"),
    ],
)
def test_kind_of(kw, text):
    assert explain.kind_of(pjob(1, 8, **kw)) == text


@pytest.mark.parametrize(
    "job, k, c, exclusive, text",
    [
        (pjob(1, 8), 1, 8, False, "needs 8 GPUs on one node"),
        (pjob(1, 8), 1, 8, True, "needs 8 GPUs on a whole node to itself"),
        (pjob(1, 4, rdma=True), 1, 4, False, "needs 4 GPUs (RDMA) on one node"),
        (pjob(1, 1), 1, 1, False, "needs 1 GPU on one node"),  # page walk: "1 GPUs"
        (
            pjob(1, 16, rdma=True, gpu_memory_gb=80),
            2,
            8,
            False,
            "needs 2 whole RDMA nodes (80 GB) in one rack (else the fewest racks of one block)",
        ),
        (
            pjob(1, 12),
            3,
            4,
            False,
            "needs 3 nodes with 4 free GPUs each, in one rack (else the fewest racks of one block)",
        ),
        (
            pjob(1, 12, exclusive_node=True),
            3,
            4,
            True,
            "needs 3 whole nodes in one rack (else the fewest racks of one block)",
        ),
    ],
)
def test_describe_shape(job, k, c, exclusive, text):
    assert explain.describe_shape(job, k, c, exclusive, 8) == text
    assert explain.describe_shape(job, k, c, exclusive, 8, max_rack_nodes=k) == text


def test_describe_shape_spans_racks_when_no_rack_is_big_enough():
    job = pjob(1, 1024, rdma=True)
    assert explain.describe_shape(job, 128, 8, False, 8, max_rack_nodes=32) == (
        "needs 128 whole RDMA nodes across the fewest racks of one block (no rack has 128 "
        "such nodes: at most 32)"
    )


def test_never_fits():
    assert explain.never_fits(pjob(1, 8), "no node has B200 GPUs", {"n": 1}) == (
        Code.NEVER_FITS,
        "This job can never run as asked, even on an empty, healthy cluster: no node has B200 "
        "GPUs.",
        {"n": 1, "no_estimate_reason": "it can never run as asked"},
        "Change the request (fewer GPUs, fewer GPUs per node, less GPU memory, or no RDMA) "
        "and resubmit.",
    )


def test_quota_exceeded_details():
    code, _msg, details, _remedy = explain.quota_exceeded(pjob(1, 8), "line", "llm", 12, 16, "")
    assert code == Code.QUOTA_EXCEEDED
    assert details == {
        "scope": "line",
        "name": "llm",
        "held_gpus": 12,
        "quota_gpus": 16,
        "requested_gpus": 8,
        "room_gpus": 4,
        "short_gpus": 4,
        "no_estimate_reason": "no running work of line llm is predicted to release enough GPUs",
    }
    _code, _msg, details, _remedy = explain.quota_exceeded(
        pjob(1, 8), "line", "llm", 12, 16, "", NOW
    )
    assert details["quota_room_at"] == "1970-01-12T13:46:40Z"
    assert "no_estimate_reason" not in details
    _code, _msg, details, _remedy = explain.quota_exceeded(
        pjob(1, 32), "queue", "q", 20, 16, "", NOW
    )
    assert details["room_gpus"] == 0 and details["short_gpus"] == 32
    assert "quota_room_at" not in details  # no release makes room for it
    assert details["no_estimate_reason"] == "it is larger than the whole queue quota"


QUOTA_WORDS = [
    (
        (pjob(1, 8, tier="core"), "line", "llm", 12, 16, "", None),
        "Line llm holds 12 of its 16 GPU quota; this job needs 8.",
        "Starts once 4 GPUs of line llm are released, or after a quota increase. "
        "A preemptible job could borrow idle capacity meanwhile.",
    ),
    (
        (pjob(1, 8), "queue", "q", 12, 16, "It may borrow idle capacity.", NOW),
        "Queue q holds 12 of its 16 GPU quota; this job needs 8. It may borrow idle capacity.",
        "Starts once 4 GPUs of queue q are released (predicted by 1970-01-12 13:46 UTC), "
        "or after a quota increase. It may start sooner on borrowed idle capacity.",
    ),
    (
        (pjob(1, 32), "queue", "q", 20, 16, "", NOW),
        "Queue q holds 20 of its 16 GPU quota; this job needs 32.",
        "The job is larger than the whole queue quota: ask for a quota increase.",
    ),
]


@pytest.mark.parametrize("args, msg, remedy", QUOTA_WORDS)
def test_quota_exceeded_words(args, msg, remedy):
    _code, got_msg, _details, got_remedy = explain.quota_exceeded(*args)
    assert (got_msg, got_remedy) == (msg, remedy)


def test_nodes_unavailable():
    details = {"unavailable_nodes": 2, "healthy_matching_nodes": 1}
    assert explain.nodes_unavailable(pjob(1, 8), SHAPE, details) == (
        Code.NODES_UNAVAILABLE,
        "This job needs 8 GPUs on one node; that only exists if unavailable nodes are counted "
        "(2 matching nodes are cordoned, draining, down or unhealthy).",
        {**details, "no_estimate_reason": "it depends on when unavailable nodes return to service"},
        "Starts when enough of those nodes return to service; ask on-call, or request fewer GPUs.",
    )


def test_priority_in_strict_order():
    code, msg, details, remedy = explain.priority(pjob(1, 8), SHAPE, 2, 16, 1, True)
    assert code == Code.PRIORITY
    assert msg == (
        "Waiting its turn: the policy keeps strict order and 2 jobs ahead needing 16 GPUs "
        "are blocked."
    )
    assert details == {
        "ahead_jobs": 2,
        "ahead_gpus": 16,
        "reservations_ahead": 1,
        "strict_order": 1,
    }
    assert remedy == "Starts after the jobs ahead of it start."


def test_priority_behind_higher_priority_work():
    _code, msg, details, remedy = explain.priority(pjob(1, 8), SHAPE, 2, 16, 1, False)
    assert msg == (
        "This job needs 8 GPUs on one node; the GPUs left free this cycle would fit it, but "
        "they are reserved for higher-priority work (1 reservation holds nodes, and 2 jobs "
        "ahead still wait for 16 GPUs)."
    )
    assert details["strict_order"] == 0
    assert remedy.startswith("Starts when the work ahead is placed")
    _code, one, _details, _remedy = explain.priority(pjob(1, 8), SHAPE, 1, 8, 1, False)
    assert "(1 reservation holds nodes, and 1 job ahead still waits for 8 GPUs)" in one
    _code, strict, _details, _remedy = explain.priority(pjob(1, 8), SHAPE, 1, 1, 0, True)
    assert strict.endswith("1 job ahead needing 1 GPU is blocked.")


def test_preempting():
    assert explain.preempting(pjob(1, 8), 2, 12, NOW + 300) == (
        Code.PREEMPTING,
        "Making room: 2 running jobs holding 12 GPUs (lower priority, or on borrowed "
        "capacity) are being preempted and will stop by 1970-01-12 13:51 UTC.",
        {"victims": 2, "victim_gpus": 12, "victims_stop_at": "1970-01-12T13:51:40Z"},
        "Nothing to do: it starts as soon as they have stopped.",
    )
    _code, msg, details, _remedy = explain.preempting(pjob(1, 8), 1, 8, None)
    assert msg.endswith("will stop by unknown.") and "victims_stop_at" not in details
    assert msg.startswith("Making room: 1 running job holding 8 GPUs (lower priority, or on ")
    assert "capacity) is being preempted" in msg
    assert details["no_estimate_reason"] == "the jobs making room have no stop deadline"


def test_topology_on_one_node_and_on_several():
    one = {"nodes_needed": 1, "best_node_free": 6, "free_gpus": 10, "where": "r0: 6, r1: 4"}
    code, msg, details, _remedy = explain.topology(pjob(1, 8), SHAPE, one)
    assert code == Code.TOPOLOGY and details is one
    assert msg == (
        "This job needs 8 GPUs on one node; 10 such GPUs are left free this cycle but "
        "scattered: the emptiest matching node has 6. Free GPUs by rack: r0: 6, r1: 4."
    )
    several = {
        "nodes_needed": 2,
        "best_rack": "r0",
        "best_rack_nodes": 1,
        "best_block_nodes": 1,
        "free_gpus": 14,
    }
    _code, msg, _details, remedy = explain.topology(pjob(1, 16), "needs 2 whole nodes", several)
    assert msg == (
        "This job needs 2 whole nodes; 14 such GPUs are left free this cycle but scattered: "
        "the best rack (r0) has 1 and the best block 1 such nodes."
    )
    assert remedy.startswith("Starts when enough neighbouring capacity frees up")


def test_topology_with_no_rack_holding_a_whole_matching_node():
    # Seen on the live demo: "the best rack () has 0 and the best block 0 such nodes".
    none = {
        "nodes_needed": 8,
        "best_rack": "",
        "best_rack_nodes": 0,
        "best_block_nodes": 0,
        "free_gpus": 40,
    }
    _code, msg, _details, _remedy = explain.topology(pjob(1, 64), "needs 8 whole nodes", none)
    assert msg == (
        "This job needs 8 whole nodes; 40 such GPUs are left free this cycle but scattered: "
        "no rack has a whole matching node free."
    )


def test_insufficient():
    assert explain.insufficient(pjob(1, 8), SHAPE, {"free_gpus": 3}) == (
        Code.INSUFFICIENT_GPUS,
        "This job needs 8 GPUs on one node; only 3 matching GPUs are left free this cycle, 5 "
        "short.",
        {"free_gpus": 3, "short_gpus": 5},
        "Starts when 5 more matching GPUs are released.",
    )


def test_insufficient_for_one_gpu_says_gpu():
    """Page walk: the what-if of a 1-GPU job read "only 0 matching GPUs are left free this
    cycle, 1 short" and "Starts when 1 more matching GPUs are released"; none left is "no
    matching GPU is left free"."""
    one = pjob(1, 1)
    _code, msg, _details, remedy = explain.insufficient(
        one, "needs 1 GPU on one node", {"free_gpus": 0}
    )
    assert msg.endswith("; no matching GPU is left free this cycle, 1 short.")
    assert remedy == "Starts when 1 more matching GPU is released."
    _code, msg, _details, remedy = explain.insufficient(pjob(1, 8), SHAPE, {"free_gpus": 1})
    assert "only 1 matching GPU is left free this cycle, 7 short." in msg


def test_demoted_wraps_the_underlying_reason():
    underlying = (Code.PRIORITY, "Behind others.", {"ahead_jobs": 1}, "Wait.")
    assert explain.demoted(pjob(1, 8, preemption_count=4), underlying, 3) == (
        Code.DEMOTED,
        "Preempted 4 times (more than 3): moved to the back of its tier and protected from "
        "further preemption. Meanwhile: Behind others.",
        {"ahead_jobs": 1, "underlying_code": Code.PRIORITY, "preemption_count": 4},
        "Re-check the job's priority and queue with your team lead. Wait.",
    )
    assert underlying[2] == {"ahead_jobs": 1}  # not modified
