"""Worker hosts as separate machines: one network namespace each, joined to the farm's namespace by a veth pair.

A farm test or benchmark makes a ``HostNetwork``: the farm's services (the Prefect server, the S3 endpoint) listen on
its ``address``, a loopback-range address of this namespace (127.0.0.0/8 is local here, whatever the interfaces);
each ``Host`` is a namespace whose only link is a veth pair to this namespace, with a /32 loopback-range address at
each end and ``route_localnet`` so that the kernel routes 127.x over it. Processes started on a host reach the farm
through that link only, so:

- ``kill()`` is a host going away (power lost, instance reclaimed without notice): the link goes silent first, so no
  FIN or RST from the dying processes reaches the server, then every process in the namespace is SIGKILLed together;
- ``cut()`` / ``restore()`` is a network partition: a ``blackhole`` qdisc on both ends drops every packet silently
  (connections stall, nothing is reset), and removing it lets TCP's retransmissions carry on.

Names carry the creating process's id (``trtfarm-h<pid>-<n>``), so concurrent runs never collide, and a run killed
before its teardown leaves namespaces that the next one removes. Where namespaces cannot be made (not root, no
``ip``, a sandbox without CAP_SYS_ADMIN) ``HostNetwork.available`` is False and ``why_not`` says why: hosts are then
process groups on this namespace's 127.0.0.1 (``kill`` SIGKILLs the group; ``cut`` SIGSTOPs it, ``restore``
SIGCONTs it: a frozen host answers nothing either).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "trtfarm-h"


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def _run(argv: list[str], ns: str | None = None) -> None:
    argv = ["ip", "netns", "exec", ns, *argv] if ns else argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> int:
    """Remove host namespaces whose creating process is gone (a run killed before its teardown)."""
    if shutil.which("ip") is None:
        return 0
    removed = 0
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _kill_namespace(name)
            removed += 1
    return removed


def _namespace_pids(ns: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in ``ns`` (until none is left), then delete it (its veth pair goes with it)."""
    deadline = time.monotonic() + 30
    while (pids := _namespace_pids(ns)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    _ip("netns", "delete", ns, check=False)


class HostNetwork:
    """The farm's namespace and the host namespaces joined to it; ``close()`` removes every host, even after a failure.

    ``address`` is where the farm's services must listen for hosts to reach them (127.0.0.1 without namespaces).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.hosts: list[Host] = []
        self.why_not = self._probe()
        self.available = self.why_not is None
        self.address = self._free_subnet() + ".1" if self.available else "127.0.0.1"

    def _probe(self) -> str | None:
        if shutil.which("ip") is None:
            return "the `ip` command (iproute2) is not installed"
        if os.geteuid() != 0:
            return "not running as root"
        remove_stale()
        probe = f"{PREFIX}{self.pid}-probe"
        done = _ip("netns", "add", probe, check=False)
        if done.returncode != 0:
            return f"`ip netns add` failed: {done.stderr.strip() or done.stdout.strip()}"
        _ip("netns", "delete", probe, check=False)
        return None

    @staticmethod
    def _free_subnet() -> str:
        """A /24 in 127.0.0.0/8 that no interface or local route of this namespace uses."""
        used = _ip("-o", "addr").stdout + _ip("route", "show", "table", "local").stdout
        for _ in range(200):
            subnet = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
            if f"{subnet}." not in used:
                return subnet
        raise RuntimeError("no free 127.x.y.0/24 for the host network")

    def host(self, label: str) -> Host:
        """A new host (namespace, veth pair, addresses, routes); ``label`` names it in logs."""
        host = Host(self, len(self.hosts) + 2, label)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        """Kill every host's processes and remove its namespace."""
        for host in self.hosts:
            host.remove()


class Host:
    """One machine of the farm: its processes, its link to the farm, and the faults it can suffer."""

    def __init__(self, net: HostNetwork, index: int, label: str) -> None:
        self.net, self.label, self.procs = net, label, []
        self.ns = f"{PREFIX}{net.pid}-{index}"
        self.veth_farm, self.veth_host = f"tfh{net.pid}{index:02d}f", f"tfh{net.pid}{index:02d}h"
        self.gone = False
        if net.available:
            self.address = net.address.rsplit(".", 1)[0] + f".{index}"
            self._make()
        else:
            self.address = "127.0.0.1"

    def _make(self) -> None:
        farm, addr = self.net.address, self.address
        _ip("netns", "add", self.ns)
        try:
            _ip("link", "add", self.veth_farm, "type", "veth", "peer", "name", self.veth_host)
            _ip("link", "set", self.veth_host, "netns", self.ns)
            _ip("addr", "add", f"{farm}/32", "dev", self.veth_farm)  # answers ARP for the farm's address
            _run(["sysctl", "-qw", f"net.ipv4.conf.{self.veth_farm}.route_localnet=1"])
            _ip("link", "set", self.veth_farm, "up")
            _ip("route", "add", "table", "local", f"{addr}/32", "dev", self.veth_farm)  # beats lo's 127.0.0.0/8
            _ip("link", "set", "lo", "up", ns=self.ns)
            _ip("addr", "add", f"{addr}/32", "dev", self.veth_host, ns=self.ns)
            _run(["sysctl", "-qw", f"net.ipv4.conf.{self.veth_host}.route_localnet=1"], ns=self.ns)
            _ip("link", "set", self.veth_host, "up", ns=self.ns)
            _ip("route", "add", "table", "local", f"{farm}/32", "dev", self.veth_host, ns=self.ns)
        except Exception:
            self.remove()
            raise

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` as run on this host."""
        return ["ip", "netns", "exec", self.ns, *argv] if self.net.available else argv

    def spawn(self, argv: list[str], *, env: dict[str, str], log: Path, cwd: Path | None = None) -> subprocess.Popen:
        """Start ``argv`` on this host in its own process group, output to ``log``."""
        out = open(log, "ab")  # noqa: SIM115 - the process holds it
        proc = subprocess.Popen(self.argv(argv), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        """Every process running on this host."""
        if self.net.available:
            return [] if self.gone else _namespace_pids(self.ns)
        return [p.pid for p in self.procs if p.poll() is None]

    def cut(self) -> None:
        """Partition: every packet between this host and the farm is dropped, both ways, from now on."""
        if not self.net.available:
            self._signal_groups(signal.SIGSTOP)
            return
        _run(["tc", "qdisc", "replace", "dev", self.veth_farm, "root", "blackhole"])
        _run(["tc", "qdisc", "replace", "dev", self.veth_host, "root", "blackhole"], ns=self.ns)

    def restore(self) -> None:
        """End the partition: packets flow again and stalled connections carry on."""
        if not self.net.available:
            self._signal_groups(signal.SIGCONT)
            return
        if self.gone:
            return
        _run(["tc", "qdisc", "del", "dev", self.veth_farm, "root"])
        _run(["tc", "qdisc", "del", "dev", self.veth_host, "root"], ns=self.ns)

    def kill(self) -> None:
        """The host goes away: its link goes silent, then all its processes die at once (SIGKILL)."""
        if not self.net.available:
            self._signal_groups(signal.SIGKILL)
        else:
            self.cut()
            _kill_namespace(self.ns)
            self.gone = True
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def _signal_groups(self, signum: int) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

    def remove(self) -> None:
        """Kill what still runs on this host and remove it (idempotent)."""
        if self.net.available:
            _kill_namespace(self.ns)
            _ip("link", "delete", self.veth_farm, check=False)  # at once: a namespace's own links go asynchronously
            self.gone = True
        else:
            self._signal_groups(signal.SIGCONT)
            self._signal_groups(signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
