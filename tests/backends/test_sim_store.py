"""The simulator backend and its state store.

First the backend alone on an in-memory store (no Django): how it opens (afresh, from a
save, after an inventory change), how its clock catches up, what it saves. Then the
portal's store (scheduling/sim_state.py): a save round-trips through ``SimulatorState``,
and a save rolled back with its transaction leaves the cluster as it was.
"""

from __future__ import annotations

import pytest

from scheduling.backends.base import PermanentBackendError, run_ref
from scheduling.backends.config import BackendConfig, BackendContext
from scheduling.backends.sim_store import MAX_CATCH_UP_S, SavedSimulator, catch_up
from scheduling.backends.simulator import DEFAULT_SPEED, SimulatorBackend
from scheduling.engine.types import Slot
from tests.backends.contract import launch_request
from tests.backends.sim_stores import MemorySimulatorStore, demo_nodes

T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    "gap, speed, virtual",
    [
        (10, 60, 600), (0, 60, 0), (-5, 60, 0), (10, 0, 0), (3600, 1, 3600),
        (3 * 3600, 60, MAX_CATCH_UP_S), (59.999, 60, 3599.94), (61, 60, MAX_CATCH_UP_S),
    ],
)  # fmt: skip
def test_the_catch_up_is_the_speed_times_the_gap_up_to_an_hour(gap, speed, virtual):
    assert catch_up(gap, speed) == pytest.approx(virtual)


def test_a_save_knows_its_nodes_sorted():
    saved = SavedSimulator(state={"nodes": [["b", 1], ["a", 2]]}, virtual_now=0, saved_wall=0,
                           speed=1)  # fmt: skip
    assert saved.node_names() == ["a", "b"]
    assert SavedSimulator(state={}, virtual_now=0, saved_wall=0, speed=1).node_names() == []


# ---------------------------------------------------------------------------------------
# The backend on an in-memory store
# ---------------------------------------------------------------------------------------
def opened(store: MemorySimulatorStore, wall_now: float, **kw) -> SimulatorBackend:
    return SimulatorBackend(store, wall_now=wall_now, **kw)


def test_the_first_open_builds_the_inventory_at_wall_time_and_close_saves_it():
    store = MemorySimulatorStore(seed=11)
    backend = opened(store, T0, speed=60.0)
    assert backend.now() == T0 and backend.sim.seed == 11
    assert sorted(backend.sim.nodes) == sorted(n.name for n in demo_nodes())
    assert store.saved is None, "nothing is saved before close"
    backend.close()
    assert store.saves == 1
    assert (store.saved.virtual_now, store.saved.saved_wall, store.saved.speed) == (T0, T0, 60.0)
    assert store.saved.node_names() == sorted(n.name for n in demo_nodes())


def test_reopening_catches_up_the_wall_time_since_the_save_times_the_speed():
    store = MemorySimulatorStore()
    opened(store, T0, speed=60.0).close()
    backend = opened(store, T0 + 10)
    assert backend.now() == pytest.approx(T0 + 600)
    backend.close()
    assert store.saved.saved_wall == T0 + 10 and store.saved.virtual_now == pytest.approx(T0 + 600)


def test_after_a_long_stop_the_clock_catches_up_an_hour_at_most():
    store = MemorySimulatorStore()
    opened(store, T0, speed=60.0).close()
    assert opened(store, T0 + 5 * 3600).now() == pytest.approx(T0 + MAX_CATCH_UP_S)


def test_opening_without_advance_leaves_the_clock_where_it_was_saved():
    store = MemorySimulatorStore()
    opened(store, T0, speed=60.0).close()
    backend = opened(store, T0 + 10, advance=False)
    assert backend.now() == T0
    backend.advance(30)
    assert backend.now() == T0 + 30, "advance moves it by hand"


def test_a_saved_speed_wins_over_the_configured_one():
    store = MemorySimulatorStore()
    opened(store, T0, speed=60.0).close()
    backend = opened(store, T0 + 10, speed=1.0)
    assert backend.speed == 60.0 and backend.now() == pytest.approx(T0 + 600)


def test_runs_survive_a_close_and_reopen():
    store = MemorySimulatorStore()
    backend = opened(store, T0, speed=0.0)
    node = sorted(backend.sim.nodes)[0]
    req = launch_request(5, [Slot(node, (0, 1))])
    backend.launch(req)
    backend.close()
    again = opened(store, T0 + 100)
    (job,) = [j for j in again.observe().jobs if j.ref == req.ref]
    assert (job.job_id, job.placement) == (5, (Slot(node, (0, 1)),))


def test_an_inventory_change_rebuilds_the_cluster_afresh_keeping_the_speed():
    store = MemorySimulatorStore()
    backend = opened(store, T0, speed=60.0)
    backend.launch(launch_request(5, [Slot(sorted(backend.sim.nodes)[0], (0,))]))
    backend.close()
    store.inventory = demo_nodes(nodes=6, nodes_per_rack=2)
    rebuilt = opened(store, T0 + 10)
    assert len(rebuilt.sim.nodes) == 6
    assert rebuilt.observe().jobs == (), "the old cluster's runs are gone"
    assert rebuilt.now() == T0 + 10, "a fresh cluster starts at wall time, no catch-up"
    assert rebuilt.speed == 60.0


def test_a_renamed_node_counts_as_an_inventory_change():
    store = MemorySimulatorStore()
    opened(store, T0).close()
    store.inventory[0].name = "renamed"
    assert "renamed" in opened(store, T0).sim.nodes


def test_open_needs_a_store_and_reads_the_speed_from_the_config():
    with pytest.raises(PermanentBackendError, match="state store") as err:
        SimulatorBackend.open(BackendContext())
    assert err.value.code == "bad_config"
    store = MemorySimulatorStore()
    context = BackendContext(BackendConfig({"SIMULATOR_SPEED": 0.0}, {}), wall_now=T0,
                             simulator_store=store)  # fmt: skip
    backend = SimulatorBackend.open(context)
    assert backend.speed == 0.0 and backend.store is store and backend.now() == T0
    unset = BackendContext(BackendConfig({}, {}), wall_now=T0, simulator_store=store)
    assert SimulatorBackend.open(unset).speed == DEFAULT_SPEED


# ---------------------------------------------------------------------------------------
# The portal's store: the SimulatorState row
# ---------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_database_store_round_trips_a_save():
    from scheduling.models import SimulatorState
    from scheduling.sim_state import DatabaseSimulatorStore

    store = DatabaseSimulatorStore()
    assert store.load() is None and store.row is None
    saved = SavedSimulator(state={"nodes": [["a", 8]], "now": 5.0}, virtual_now=T0 + 5,
                           saved_wall=T0, speed=12.5)  # fmt: skip
    store.save(saved)
    assert DatabaseSimulatorStore().load() == saved
    later = SavedSimulator(state={"nodes": []}, virtual_now=T0 + 9, saved_wall=T0 + 1, speed=2)
    reader = DatabaseSimulatorStore()
    reader.load()
    reader.save(later)
    assert SimulatorState.objects.count() == 1, "one row, updated in place"
    assert DatabaseSimulatorStore().load() == later
    assert reader.row.pk == store.row.pk


@pytest.mark.django_db
def test_the_state_is_kept_as_json_text_lz4_compressed_where_the_server_can():
    """Not jsonb: the server neither parses nor re-renders the 0.7 MB save (#16)."""
    from django.db import connection, transaction

    from scheduling.models import SimulatorState

    state = {"nodes": [["a", 8]], "now": 1.5e9 + 0.123456789, "x": [None, True, "é", {"k": 1}]}
    SimulatorState.objects.create(state=state, virtual_now=0, saved_wall=0)
    assert SimulatorState.objects.get().state == state
    SimulatorState.objects.update(state={**state, "now": 2.0})
    assert SimulatorState.objects.get().state["now"] == 2.0
    with connection.cursor() as cur:
        cur.execute(
            "SELECT format_type(atttypid, atttypmod), attcompression FROM pg_attribute "
            "WHERE attrelid = 'scheduling_simulatorstate'::regclass AND attname = 'state'"
        )
        kind, compression = cur.fetchone()
        try:
            with transaction.atomic():
                cur.execute("CREATE TEMPORARY TABLE lz4_probe (t text COMPRESSION lz4)")
            has_lz4 = True
        except Exception:  # noqa: BLE001 - a server built without lz4
            has_lz4 = False
    assert kind == "text"
    assert compression == ("l" if has_lz4 else "")


@pytest.mark.django_db
def test_the_database_store_lists_the_node_inventory_and_the_seed():
    from scheduling.models import ClusterSettings, Node
    from scheduling.sim_state import DatabaseSimulatorStore

    for name, rack in (("n2", "r1"), ("n1", "r0")):
        Node.objects.create(name=name, rack=rack, block="b0", gpu_model="H100", gpu_memory_gb=80,
                            gpus_total=8, rdma=True, inference=name == "n2")  # fmt: skip
    settings_row = ClusterSettings.load()
    settings_row.seed = 42
    settings_row.save()
    store = DatabaseSimulatorStore()
    nodes = store.nodes()
    assert [(n.name, n.rack, n.gpus_total, n.inference) for n in nodes] == [
        ("n1", "r0", 8, False), ("n2", "r1", 8, True)
    ]  # fmt: skip
    assert store.nodes()[0] is not nodes[0], "fresh objects: the simulator mutates its nodes"
    assert store.seed() == 42


@pytest.mark.django_db(transaction=True)
def test_a_save_rolled_back_with_its_transaction_leaves_the_cluster_as_it_was(demo):
    """A worker dying mid-cycle: the launch and the clock go back with the database."""
    from django.db import transaction

    from scheduling.backend_factory import open_simulator
    from scheduling.models import SimulatorState

    with transaction.atomic():
        open_simulator(wall_now=T0, advance=False).close()
    before = SimulatorState.objects.get()
    node = min(row[0] for row in before.state["nodes"])
    with pytest.raises(RuntimeError), transaction.atomic():
        backend = open_simulator(wall_now=T0 + 60)
        backend.launch(launch_request(9, [Slot(node, (0,))]))
        backend.close()
        raise RuntimeError("the worker dies before the commit")
    after = SimulatorState.objects.get()
    assert (after.virtual_now, after.saved_wall, after.state) == (
        before.virtual_now, before.saved_wall, before.state
    )  # fmt: skip
    with transaction.atomic():
        reopened = open_simulator(wall_now=T0, advance=False)
        assert run_ref(9, 1) not in {j.ref for j in reopened.observe().jobs}


@pytest.mark.django_db
def test_the_next_load_in_the_same_thread_takes_the_simulator_just_saved(demo):
    """No decoding of the state the thread itself wrote: the very object comes back, once,
    and it is the simulator the row holds."""
    from scheduling.backend_factory import open_simulator
    from scheduling.models import SimulatorState
    from scheduling.sim_state import DatabaseSimulatorStore
    from scheduling.simcore.simulator import Simulator

    first = open_simulator(wall_now=T0, advance=False)
    node = min(first.sim.nodes)
    first.launch(launch_request(9, [Slot(node, (0,))]))
    first.close()
    again = open_simulator(wall_now=T0, advance=False)
    assert again.sim is first.sim
    assert again.sim.to_dict() == Simulator.from_dict(SimulatorState.objects.get().state).to_dict()
    second = DatabaseSimulatorStore().load()
    assert second.live is None and second.state is not None, "taken once: the next load reads"


@pytest.mark.django_db
def test_any_other_write_of_the_row_makes_the_next_load_read_it(demo):
    """A direct write in the same transaction (not through the store) is a new row version:
    the object saved before it is not handed back."""
    from scheduling.backend_factory import open_simulator
    from scheduling.models import SimulatorState

    first = open_simulator(wall_now=T0, advance=False)
    first.close()
    row = SimulatorState.objects.get()
    SimulatorState.objects.update(state={**row.state, "launch_seq": 77})
    again = open_simulator(wall_now=T0, advance=False)
    assert again.sim is not first.sim and again.sim._launch_seq == 77


@pytest.mark.django_db
def test_the_simulator_drills_audit_the_saved_row(demo):
    from django.contrib.auth import get_user_model

    from core.models import AuditRecord
    from scheduling.models import SimulatorState
    from scheduling.sim_services import advance_clock

    result = advance_clock(get_user_model().objects.get(username="admin"), 120)
    assert result["advanced_s"] == 120.0
    record = AuditRecord.objects.get(action="simulator.advance")
    assert record.target_id == str(SimulatorState.objects.get().pk)
    assert record.target_type == "scheduling.simulatorstate"
