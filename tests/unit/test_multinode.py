"""The one-host two-node demo's network and per-node settings (no namespace is made here)."""

import ipaddress

import subprocess
from types import SimpleNamespace

import pytest

from helpers.job import multinode
from helpers.job.multinode import (HCCL_IF_IP, HCCL_SOCKET_IFNAME, device_network_unconfigured, free_subnet,
                                   node_env, two_node_unavailable)


def test_subnet_avoids_routes_the_host_already_has():
    assert str(free_subnet(4, ["default", "172.17.0.0/16"])) == "10.251.5.0/24"
    # a cluster network that routes 10.251.5.0/24 is skipped, so is all of 10/8
    assert str(free_subnet(4, ["10.251.5.0/24"])) == "10.251.6.0/24"
    net = free_subnet(4, ["default", "10.0.0.0/8"])
    assert not net.overlaps(ipaddress.ip_network("10.0.0.0/8"))


def test_each_simulated_node_sees_its_own_cards():
    assert node_env("CPU", 1, 4, "msvb1", "10.251.1.2") == {}
    assert node_env("GPU", 0, 4, "msva1", "10.251.1.1") == {"CUDA_VISIBLE_DEVICES": "0,1,2,3",
                                                           "NCCL_SOCKET_IFNAME": "msva1"}
    assert node_env("GPU", 1, 4, "msvb1", "10.251.1.2") == {"CUDA_VISIBLE_DEVICES": "4,5,6,7",
                                                           "NCCL_SOCKET_IFNAME": "msvb1"}


def test_each_ascend_node_gives_hccl_its_own_interface_and_address():
    """HCCL's host socket follows HCCL_IF_IP / HCCL_SOCKET_IFNAME; without them both namespaces would pick by name."""
    for rank, interface, address in ((0, "msva1", "10.251.1.1"), (1, "msvb1", "10.251.1.2")):
        env = node_env("Ascend", rank, 4, interface, address)
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == ("0,1,2,3" if rank == 0 else "4,5,6,7")
        assert env[HCCL_SOCKET_IFNAME] == f"={interface}" and env[HCCL_IF_IP] == address


def hccn(ips: dict):
    """A stand-in for running ``hccn_tool -i <card> -ip -g``: ``ips[card]`` is its address (None: not set)."""
    asked = []

    def run(cmd, **kwargs):
        card = int(cmd[cmd.index("-i") + 1])
        asked.append(card)
        ip = ips.get(card)
        return SimpleNamespace(returncode=0 if ip else 255,
                               stdout=f"ipaddr:{ip}\nnetmask:255.255.255.0\n" if ip else "")
    return run, asked


def test_device_network_check_names_the_cards_without_an_address():
    which = lambda name, path=None: f"/usr/local/Ascend/driver/tools/{name}"  # noqa: E731
    run, asked = hccn({c: f"192.168.100.{101 + c}" for c in range(8)})
    assert device_network_unconfigured(range(8), which=which, run=run) is None and asked == list(range(8))
    run, _ = hccn({c: f"192.168.100.{101 + c}" for c in range(8) if c != 5})
    assert "NPUs [5] have no device IP" in device_network_unconfigured(range(8), which=which, run=run)

    def broken(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, 30)
    assert "NPUs [0, 1]" in device_network_unconfigured(range(2), which=which, run=broken)


def test_device_network_check_without_hccn_tool_says_so_and_looks_in_the_driver_folder():
    looked = []
    reason = device_network_unconfigured(range(8), which=lambda name, path=None: looked.append(path),
                                         run=lambda *a, **k: pytest.fail("nothing to run"))
    assert "hccn_tool" in reason and "missing" in reason
    assert looked and "/usr/local/Ascend/driver/tools" in looked[0]


def test_only_ascend_checks_the_device_network(monkeypatch):
    monkeypatch.setattr(multinode, "netns_unavailable", lambda: None)
    no_tool = dict(which=lambda name, path=None: None, run=lambda *a, **k: pytest.fail("not asked"))
    assert two_node_unavailable("GPU", range(8), **no_tool) is None
    assert two_node_unavailable("CPU", range(8), **no_tool) is None
    assert "hccn_tool" in two_node_unavailable("Ascend", range(8), **no_tool)
    monkeypatch.setattr(multinode, "netns_unavailable", lambda: "needs root")
    assert two_node_unavailable("Ascend", range(8), **no_tool) == "needs root"


def test_the_two_node_job_gives_each_node_its_own_env(monkeypatch):
    """run_two_node_job's launches: node 1 in the namespace, each node its cards, interface and address."""
    import contextlib

    import helpers.job.launch as launch
    from helpers.core.config import job_config

    net = multinode.TwoNodeNet("msnode7", "10.251.8.1", "10.251.8.2", host_if="msva7", peer_if="msvb7")
    monkeypatch.setattr(multinode, "two_node_network", lambda: contextlib.nullcontext(net))
    monkeypatch.setattr(multinode, "two_node_unavailable", lambda target, cards: None)
    seen = {}
    monkeypatch.setattr(launch, "run_job", lambda cfg, progress, launches: seen.update(cfg=cfg, launches=launches))
    multinode.run_two_node_job(job_config("ci", device_target="Ascend", world_size=8))
    first, second = seen["launches"]
    assert seen["cfg"].master_addr == "10.251.8.1" and seen["cfg"].local_world_size == 4
    assert first["env"][HCCL_IF_IP] == "10.251.8.1" and first["env"][HCCL_SOCKET_IFNAME] == "=msva7"
    assert second["env"][HCCL_IF_IP] == "10.251.8.2" and second["env"][HCCL_SOCKET_IFNAME] == "=msvb7"
    assert second["prefix"] == net.node1_prefix and second["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7"


def test_the_two_node_job_refuses_an_unconfigured_device_network(monkeypatch):
    from helpers.core.config import job_config

    monkeypatch.setattr(multinode, "two_node_unavailable", lambda target, cards: f"{target} {list(cards)}: no IPs")
    with pytest.raises(RuntimeError, match=r"Ascend \[0, 1, 2, 3, 4, 5, 6, 7\]: no IPs"):
        multinode.run_two_node_job(job_config("ci", device_target="Ascend", world_size=8))
