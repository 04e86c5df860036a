"""The one-host two-node demo's network and per-node settings (no namespace is made here)."""

import ipaddress

from helpers.job.multinode import free_subnet, node_env


def test_subnet_avoids_routes_the_host_already_has():
    assert str(free_subnet(4, ["default", "172.17.0.0/16"])) == "10.251.5.0/24"
    # a cluster network that routes 10.251.5.0/24 is skipped, so is all of 10/8
    assert str(free_subnet(4, ["10.251.5.0/24"])) == "10.251.6.0/24"
    net = free_subnet(4, ["default", "10.0.0.0/8"])
    assert not net.overlaps(ipaddress.ip_network("10.0.0.0/8"))


def test_each_simulated_node_sees_its_own_cards():
    assert node_env("CPU", 1, 4, "msvb1") == {}
    assert node_env("GPU", 0, 4, "msva1") == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "NCCL_SOCKET_IFNAME": "msva1"}
    assert node_env("GPU", 1, 4, "msvb1") == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "NCCL_SOCKET_IFNAME": "msvb1"}
    assert node_env("Ascend", 1, 4, "msvb1") == {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
