#!/usr/bin/env python3
"""Regenerates the topology fixtures in this folder.

Each fixture starts as a synthetic hwloc description (sockets, NUMA nodes, caches, cores, PUs),
exported to XML by `lstopo --input DESC --of xml`. Synthetic descriptions cannot carry I/O
devices, so this script then adds the PCI tree (host bridges, switches, GPUs, NICs, their OS
devices) and, for the DGX-like host, the NVLinkBandwidth matrix that hwloc's NVML backend would
record. The result loads with `chorus-topo --xml FILE` or `HWLOC_XMLFILE=FILE lstopo`.

Usage: tests/data/topo/make_fixtures.py   (needs lstopo from Debian's `hwloc` package)
"""
import os
import subprocess
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30

A100 = dict(cls=0x0302, vendor=0x10DE, device=0x20B2, model="NVIDIA A100-SXM4-80GB")
A6000 = dict(cls=0x0300, vendor=0x10DE, device=0x2230, model="NVIDIA RTX A6000")
CX6 = dict(cls=0x0207, vendor=0x15B3, device=0x101B)
X550 = dict(cls=0x0200, vendor=0x8086, device=0x1563)
ASPEED = dict(cls=0x0300, vendor=0x1A03, device=0x2000)
NVME = dict(cls=0x0108, vendor=0x144D, device=0xA808)
BRIDGE = dict(cls=0x0604, vendor=0x1000, device=0xC010)


class Builder:
    """Adds I/O objects to a CPU-only XML topology, with fresh gp_index values."""

    def __init__(self, synthetic, hostname):
        xml = subprocess.run(["lstopo", "--input", synthetic, "--of", "xml", "-"],
                             check=True, capture_output=True, text=True).stdout
        self.root = ET.fromstring(xml)
        self.next_gp = 1 + max(int(o.get("gp_index")) for o in self.root.iter("object"))
        self.machine = self.root.find("object")
        # Synthetic topologies carry no host name; chorus-topo shows it, so give each one.
        for info in self.machine.findall("info"):
            self.machine.remove(info)
        self.machine.insert(0, ET.Element("info", name="HostName", value=hostname))
        self.packages = [o for o in self.root.iter("object") if o.get("type") == "Package"]
        self.gpu_count = 0
        self.nvml_gps = []

    def _object(self, parent, **attrs):
        attrs["gp_index"] = str(self.next_gp)
        self.next_gp += 1
        return ET.SubElement(parent, "object", attrs)

    @staticmethod
    def _info(obj, name, value):
        ET.SubElement(obj, "info", name=name, value=str(value))

    @staticmethod
    def _pci_type(dev):
        return "%04x [%04x:%04x] [%04x:%04x] a1" % (dev["cls"], dev["vendor"], dev["device"],
                                                  dev["vendor"], dev["device"])

    def host_bridge(self, parent, first_bus, last_bus):
        return self._object(parent, type="Bridge", bridge_type="0-1", depth="0",
                            bridge_pci="0000:[%02x-%02x]" % (first_bus, last_bus))

    def bridge(self, parent, busid, depth, first_bus, last_bus):
        return self._object(parent, type="Bridge", bridge_type="1-1", depth=str(depth),
                            bridge_pci="0000:[%02x-%02x]" % (first_bus, last_bus),
                            pci_busid=busid, pci_type=self._pci_type(BRIDGE),
                            pci_link_speed="31.507692")

    def pci(self, parent, busid, dev):
        return self._object(parent, type="PCIDev", pci_busid=busid, pci_type=self._pci_type(dev),
                            pci_link_speed="31.507692")

    def osdev(self, parent, name, osdev_type, subtype=None, infos=()):
        attrs = dict(type="OSDev", name=name, osdev_type=str(osdev_type))
        if subtype:
            attrs["subtype"] = subtype
        obj = self._object(parent, **attrs)
        for key, value in infos:
            self._info(obj, key, value)
        return obj

    def gpu(self, parent, busid, dev):
        obj = self.pci(parent, busid, dev)
        i = self.gpu_count
        self.gpu_count += 1
        self.osdev(obj, "cuda%d" % i, 5, "CUDA",
                   [("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"),
                    ("GPUModel", dev["model"]), ("CUDAGlobalMemorySize", 83886080)])
        nvml = self.osdev(obj, "nvml%d" % i, 1, "NVML",
                          [("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"),
                           ("GPUModel", dev["model"])])
        self.nvml_gps.append(nvml.get("gp_index"))
        return obj

    def ib_nic(self, parent, busid, index):
        obj = self.pci(parent, busid, CX6)
        self.osdev(obj, "ib%d" % index, 2, None, [("Address", "00:00:10:87:fe:80:00:00")])
        self.osdev(obj, "mlx5_%d" % index, 3, "OpenFabrics",
                   [("NodeGUID", "0c42:a103:00%02x:0000" % index), ("Port1State", 4),
                    ("Port1LID", 10 + index)])
        return obj

    def eth_nic(self, parent, busid, name):
        obj = self.pci(parent, busid, X550)
        self.osdev(obj, name, 2, None, [("Address", "3c:ec:ef:00:00:%02x" % len(name))])
        return obj

    def nvlink(self, gbps):
        """Every GPU reaches every other at `gbps` (an NVSwitch fabric), as NVML reports it."""
        n = len(self.nvml_gps)
        values = [0 if i == j else gbps * 1000 for i in range(n) for j in range(n)]
        dist = ET.SubElement(self.root, "distances2", type="OSDev", nbobjs=str(n), kind="10",
                             name="NVLinkBandwidth", indexing="gp")
        # hwloc's `length` attributes count the characters of the text.
        indexes = " ".join(self.nvml_gps) + " "
        u64values = " ".join(map(str, values)) + " "
        ET.SubElement(dist, "indexes", length=str(len(indexes))).text = indexes
        ET.SubElement(dist, "u64values", length=str(len(u64values))).text = u64values
        # distances2 must come before the <support> elements.
        self.root.remove(dist)
        first_support = list(self.root).index(self.root.find("support"))
        self.root.insert(first_support, dist)

    def write(self, name):
        ET.indent(self.root, "  ")
        with open(os.path.join(HERE, name), "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
            f.write('<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
            f.write(ET.tostring(self.root, encoding="unicode"))
            f.write("\n")


def dgx_like():
    """2 sockets; 4 PCIe switches (2 per socket), each with 2 GPUs and 2 InfiniBand NICs, like a
    DGX A100; all GPUs on one NVSwitch fabric; a BMC VGA and an NVMe drive that are not GPUs."""
    b = Builder("pack:2 [numa(memory=%d)] l3:2 l2:4 core:1 pu:2" % (512 * GiB), "dgx-like")
    for switch in range(4):
        base = 0x40 * switch
        hb = b.host_bridge(b.packages[switch // 2], base, base + 0x3F)
        root_port = b.bridge(hb, "0000:%02x:01.1" % base, 1, base + 1, base + 6)
        upstream = b.bridge(root_port, "0000:%02x:00.0" % (base + 1), 2, base + 2, base + 6)
        for port in range(4):
            bus = base + 3 + port
            down = b.bridge(upstream, "0000:%02x:%02x.0" % (base + 2, port), 3, bus, bus)
            busid = "0000:%02x:00.0" % bus
            if port < 2:
                b.gpu(down, busid, A100)
            else:
                b.ib_nic(down, busid, 2 * switch + port - 2)
    hb = b.host_bridge(b.packages[0], 0xF0, 0xF2)
    b.pci(hb, "0000:f0:00.0", ASPEED)
    nvme = b.pci(hb, "0000:f1:00.0", NVME)
    b.osdev(nvme, "nvme0n1", 0, "Disk")
    b.nvlink(gbps=300)
    b.write("dgx_like.xml")


def workstation():
    """1 socket, 4 PCIe GPUs: 0 and 1 behind a PCIe switch, 2 and 3 on root ports of their own;
    one Ethernet NIC."""
    b = Builder("pack:1 [numa(memory=%d)] l3:1 core:8 pu:2" % (256 * GiB), "workstation")
    hb = b.host_bridge(b.packages[0], 0x00, 0x7F)
    root_port = b.bridge(hb, "0000:00:01.0", 1, 0x01, 0x04)
    upstream = b.bridge(root_port, "0000:01:00.0", 2, 0x02, 0x04)
    for port in range(2):
        down = b.bridge(upstream, "0000:02:%02x.0" % port, 3, 0x03 + port, 0x03 + port)
        b.gpu(down, "0000:%02x:00.0" % (0x03 + port), A6000)
    for i, bus in enumerate((0x21, 0x41)):
        rp = b.bridge(hb, "0000:00:%02x.0" % (2 + i), 1, bus, bus)
        b.gpu(rp, "0000:%02x:00.0" % bus, A6000)
    rp = b.bridge(hb, "0000:00:1c.0", 1, 0x61, 0x61)
    b.eth_nic(rp, "0000:61:00.0", "enp97s0")
    b.write("workstation_4gpu.xml")


def cpu_one_socket():
    """1 socket, 8 cores with 2 PUs each, one Ethernet NIC."""
    b = Builder("pack:1 [numa(memory=%d)] l3:1 l2:8 core:1 pu:2" % (64 * GiB), "cpu-1s")
    hb = b.host_bridge(b.packages[0], 0x00, 0x01)
    b.eth_nic(hb, "0000:00:03.0", "eno1")
    b.write("cpu_1socket.xml")


def cpu_two_sockets():
    """2 sockets with 2 NUMA nodes each (sub-NUMA clustering), 4 cores per node; one NIC per
    socket."""
    b = Builder("pack:2 l3:2 [numa(memory=%d)] core:4 pu:2" % (64 * GiB), "cpu-2s")
    for socket, (bus, name) in enumerate(((0x00, "eno1"), (0x80, "eno2"))):
        hb = b.host_bridge(b.packages[socket], bus, bus + 1)
        b.eth_nic(hb, "0000:%02x:03.0" % bus, name)
    b.write("cpu_2socket_4numa.xml")


if __name__ == "__main__":
    dgx_like()
    workstation()
    cpu_one_socket()
    cpu_two_sockets()
