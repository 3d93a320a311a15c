"""The test hosts themselves (tests/hosts.py): a host reaches the farm's address over its link only, a cut link
drops packets both ways until it is restored, a killed host has no process left, and nothing is left behind.

Where namespaces cannot be made, the same checks run on the fallback (process groups: a cut is a stopped group).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from .hosts import PREFIX, HostNetwork

# On the host: connect to the farm, then send one byte a second and print each reply (the farm echoes it)
PINGER = """\
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
s.settimeout(None)
for i in range(600):
    s.sendall(b"x")
    s.recv(1)
    print(i, flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def net():
    n = HostNetwork()
    yield n
    n.close()


def _echo_server(address: str):
    server = socket.socket()
    server.bind((address, 0))
    server.listen()
    return server


def _echo_one(server: socket.socket) -> socket.socket:
    conn, _ = server.accept()
    import threading

    def echo():
        try:
            while data := conn.recv(64):
                conn.sendall(data)
        except OSError:  # the host went away
            pass

    threading.Thread(target=echo, daemon=True).start()
    return conn


def _lines(path) -> int:
    return len(path.read_text().splitlines())


def test_a_host_reaches_the_farm_over_its_link_and_a_cut_drops_everything_until_restored(net, tmp_path):
    if not net.available:
        pytest.skip(f"network namespaces unavailable ({net.why_not}); the fallback is tested below")
    server = _echo_server(net.address)
    host = net.host("pinger")
    log = tmp_path / "pinger.log"
    host.spawn([sys.executable, "-c", PINGER, net.address, str(server.getsockname()[1])], env={}, log=log)
    conn = _echo_one(server)
    peer = conn.getpeername()[0]
    assert peer == host.address != net.address  # it came over the link, from the host's own address
    time.sleep(1)
    assert _lines(log) > 0
    host.cut()
    time.sleep(0.5)
    before = _lines(log)
    time.sleep(2)
    assert _lines(log) == before  # silence both ways: nothing reset, nothing delivered
    host.restore()
    deadline = time.monotonic() + 30  # TCP's retransmission carries on
    while _lines(log) == before:
        assert time.monotonic() < deadline, "the connection did not carry on after the link came back"
        time.sleep(0.2)
    pids = host.pids()
    assert pids
    host.kill()
    assert host.pids() == [] and all(p.poll() is not None for p in host.procs)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert host.ns not in listed


def test_close_leaves_no_namespace_and_no_link(net):
    if not net.available:
        pytest.skip(f"network namespaces unavailable ({net.why_not})")
    hosts = [net.host(f"h{i}") for i in range(2)]
    net.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(h.ns in listed or h.veth_farm in links for h in hosts)
    assert f"{PREFIX}{net.pid}-" not in listed


def test_without_namespaces_a_host_is_a_process_group_that_stops_and_dies_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(HostNetwork, "_probe", lambda self: "forced for this test")
    net = HostNetwork()
    assert not net.available and net.address == "127.0.0.1"
    host = net.host("group")
    log = tmp_path / "ticks.log"
    child = ("import subprocess, sys; "
             "subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])")
    ticker = f"{child}\nimport time\nwhile True:\n    print(1, flush=True)\n    time.sleep(0.1)"
    proc = host.spawn([sys.executable, "-c", ticker], env={}, log=log)
    time.sleep(1.5)
    host.cut()
    time.sleep(0.3)
    frozen = _lines(log)
    time.sleep(1)
    assert _lines(log) == frozen
    host.restore()
    time.sleep(1)
    assert _lines(log) > frozen
    group = [p for p in _group_members(proc.pid)]
    assert len(group) == 2  # the process and the one it started
    host.kill()
    time.sleep(0.5)
    assert _group_members(proc.pid) == []
    net.close()


def _group_members(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    return [int(p) for p, g, st in (line.split() for line in out.splitlines()) if int(g) == pgid and "Z" not in st]
