from collections import Counter

from scheduling.simcore import build_demo_cluster


def test_demo_cluster_has_10000_gpus_in_named_racks_and_blocks():
    nodes = build_demo_cluster()
    assert len(nodes) == 1250
    assert sum(n.gpus_total for n in nodes) == 10_000
    assert nodes[0].name == "r000-n00" and nodes[0].rack == "r000" and nodes[0].block == "b0"
    by_name = {n.name: n for n in nodes}
    assert by_name["r003-n07"].rack == "r003"
    assert by_name["r009-n00"].block == "b1"  # 8 racks per block
    racks = Counter(n.rack for n in nodes)
    assert len(racks) == 40
    assert set(list(racks.values())[:-1]) == {32}
    assert len({n.name for n in nodes}) == 1250


def test_demo_cluster_mixes_models_with_h100_majority_and_homogeneous_racks():
    nodes = build_demo_cluster()
    models = Counter((n.gpu_model, n.gpu_memory_gb) for n in nodes)
    assert set(models) == {("H100", 80), ("A100", 80), ("A100", 40), ("L40S", 48)}
    assert models[("H100", 80)] > len(nodes) / 2
    for rack in {n.rack for n in nodes}:
        assert len({n.gpu_model for n in nodes if n.rack == rack}) == 1


def test_demo_cluster_has_about_15_percent_without_rdma_and_a_5_percent_inference_pool():
    nodes = build_demo_cluster()
    no_rdma = sum(not n.rdma for n in nodes) / len(nodes)
    inference = sum(n.inference for n in nodes) / len(nodes)
    assert 0.10 <= no_rdma <= 0.20
    assert 0.04 <= inference <= 0.06
    assert all(n.health == "ok" and not n.residual and not n.cordoned for n in nodes)


def test_uniform_cluster_is_identical_nodes_all_rdma_no_inference():
    nodes = build_demo_cluster(nodes=10, nodes_per_rack=4, uniform=True)
    assert [n.name for n in nodes][:5] == [
        "r000-n00",
        "r000-n01",
        "r000-n02",
        "r000-n03",
        "r001-n00",
    ]
    assert {(n.gpu_model, n.gpu_memory_gb) for n in nodes} == {("H100", 80)}
    assert all(n.rdma and not n.inference for n in nodes)
    assert len({n.rack for n in nodes}) == 3


def test_layout_is_a_function_of_the_seed():
    def layout(seed):
        return [
            (n.name, n.gpu_model, n.gpu_memory_gb, n.rdma, n.inference)
            for n in build_demo_cluster(seed=seed)
        ]

    assert layout(1) == layout(1)
    assert layout(1) != layout(2)
