#!/usr/bin/env python3
"""bench/compare/compare.py's modules (common, peers, runs, report, targets): the target checks,
the copy-roofline table and the helpers that turn medians into the table docs/PERFORMANCE.md
keeps. No peer is run: the medians are made
up here, so each expected status and ratio is known."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "compare"))
import common  # noqa: E402
import peers as peer_setup  # noqa: E402
import report  # noqa: E402
import runs  # noqa: E402
import targets  # noqa: E402
import compare  # noqa: E402,F401  (the script's imports resolve)

MiB = 1 << 20
FIVE = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
GRID = [1 << k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB, x4


def uniform(n, chorus_us, ompi_us, mpich_us=None, sizes=GRID):
    """Medians where every cell of world size n has the same times."""
    med = {}
    for coll in FIVE:
        for size in sizes:
            med[("chorus", n, coll, size)] = chorus_us
            med[("openmpi", n, coll, size)] = ompi_us
            if mpich_us is not None:
                med[("mpich", n, coll, size)] = mpich_us
    return med


def status(targets, name):
    found = [t for t in targets if t[0] == name]
    assert len(found) == 1, (name, [t[0] for t in targets])
    return found[0][1], found[0][2]


class Helpers(unittest.TestCase):
    def test_sizes_parse_and_print(self):
        self.assertEqual(common.parse_size("64M"), 64 * MiB)
        self.assertEqual(common.parse_size("1k"), 1024)
        self.assertEqual(common.parse_size("8"), 8)
        self.assertEqual(common.human(64 * MiB), "64 MiB")
        self.assertEqual(common.human(1536), "1536 B")
        self.assertEqual(common.human(1 << 30), "1 GiB")

    def test_chorus_is_timed_in_blocks_like_the_anchors(self):
        # Three blocks (the anchors' -r 3), each at least 2 calls; the warm-up as the anchors'
        # calibration: up to 4095 calls, then about 64 MiB's worth, at least 2.
        self.assertEqual(runs.BLOCKS, 3)
        self.assertEqual(runs.chorus_iters(8), (666, 4095))
        self.assertEqual(runs.chorus_iters(1 * MiB), (170, 64))
        self.assertEqual(runs.chorus_iters(64 * MiB), (2, 2))
        self.assertEqual(runs.chorus_iters(256 * MiB), (2, 2))

    def test_cells_are_time_below_64_kib_and_busbw_above(self):
        self.assertEqual(report.fmt_cell(0.5, 8, 1.0), "0.50 us")
        # 64 MiB in 10 ms at busbw factor 1: 6.71 GB/s.
        self.assertEqual(report.fmt_cell(10000.0, 64 * MiB, 1.0), "6.71 GB/s")
        self.assertEqual(report.fmt_cell(None, 8, 1.0), "-")
        self.assertIsNone(report.speedup(None, 1.0))
        self.assertAlmostEqual(report.speedup(3.0, 1.0), 3.0)

    def test_above_the_limit_open_mpi_is_the_only_peer(self):
        peers = ["openmpi", "mpich", "gloo"]
        self.assertEqual(peer_setup.peers_for(4, peers, 4), peers)
        self.assertEqual(peer_setup.peers_for(8, peers, 4), ["openmpi"])
        self.assertEqual(peer_setup.peers_for(8, ["mpich"], 4), [])
        self.assertEqual(peer_setup.peers_for(8, peers, 8), peers)

    def test_mpi_extra_runs_each_collective_the_anchors_lack(self):
        # One anchor launch for the collectives it has, one mpi_extra launch per other (-c), and
        # each CSV row filed under its collective: alltoall under all_to_all, not reduce.
        import tempfile
        launched = []
        raw = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        raw.close()
        rows = {"mpi_coll": "openmpi,default,2,allreduce,1024,10,t,1,2.0;3.0;4.0\n",
                "reduce": "openmpi,default,2,reduce,1024,10,t,1,5.0;5.0;5.0\n",
                "alltoall": "openmpi,default,2,alltoall,1024,10,t,1,7.0;6.0;8.0\n"}

        def fake_run(cmd, timeout):
            launched.append(cmd)
            key = cmd[cmd.index("-c") + 1] if "extra" in " ".join(cmd) else "mpi_coll"
            with open(raw.name, "a") as f:
                f.write(rows[key])
            return 0, "", ""
        real = peer_setup.run
        peer_setup.run = fake_run
        try:
            times = peer_setup.run_peer("openmpi", {"coll": "mpi_coll", "extra": "extra"}, 2,
                                        ["all_reduce", "reduce", "all_to_all"], [1024], raw.name,
                                        "t", 10)
        finally:
            peer_setup.run = real
            os.unlink(raw.name)
        extra = [c[c.index("extra"):c.index("extra") + 3] for c in launched if "extra" in c]
        self.assertEqual(extra, [["extra", "-c", "reduce"], ["extra", "-c", "alltoall"]])
        self.assertEqual(times, {("all_reduce", 1024): 3.0, ("reduce", 1024): 5.0,
                                 ("all_to_all", 1024): 7.0})


class Targets(unittest.TestCase):
    def test_ratios_at_and_below_the_target(self):
        med = uniform(2, 1.0, 2.5, 2.0)
        med[("chorus", 2, "all_reduce", 8)] = 1.0
        med[("openmpi", 2, "all_reduce", 8)] = 1.0  # level: "time <= Open MPI" is met
        med[("openmpi", 2, "all_reduce", 64 * MiB)] = 3.0  # exactly 3x
        med[("openmpi", 2, "all_reduce", 256 * MiB)] = 2.9
        t = targets.check_targets(med, {"chorus": 10.0}, [2], FIVE, GRID + [8])
        self.assertEqual(status(t, "np=2 all_reduce 64 MiB busbw >= 3x Open MPI")[0], "MET")
        s, detail = status(t, "np=2 all_reduce 256 MiB busbw >= 3x Open MPI")
        self.assertEqual(s, "NOT MET")
        self.assertIn("2.90x", detail)
        self.assertEqual(status(t, "np=2 all_reduce 8 B time <= Open MPI")[0], "MET")
        self.assertEqual(status(t, "np=2 all_gather 64 MiB >= 2x Open MPI")[0], "MET")
        # The faster peer is MPICH at 2.0 us: 2x everywhere.
        self.assertEqual(
            status(t, "np=2 every collective 1 KiB-256 MiB >= the faster of Open MPI and MPICH")[0],
            "MET")
        self.assertEqual(status(t, "start-up <= 45 ms (chorus-run, 2 ranks, to first all-reduce)")[0],
                         "MET")

    def test_world_sizes_not_run_are_not_measured(self):
        t = targets.check_targets(uniform(2, 1.0, 2.0), {}, [2], FIVE, GRID)
        for n in (4, 8):
            self.assertEqual(status(t, f"np={n} every collective 64 MiB >= 2x Open MPI")[0],
                             "NOT MEASURED")
        self.assertEqual(status(t, "start-up <= 45 ms (chorus-run, 2 ranks, to first all-reduce)")[0],
                         "NOT MEASURED")

    def test_np8_is_judged_against_open_mpi_and_names_the_worst_cell(self):
        med = uniform(8, 1.0, 2.5)
        med[("openmpi", 8, "broadcast", 64 * 1024)] = 0.8  # chorus 0.80x here
        t = targets.check_targets(med, {}, [8], FIVE, GRID)
        s, detail = status(t, "np=8 every collective 64 MiB >= 2x Open MPI")
        self.assertEqual(s, "MET")
        s, detail = status(t, "np=8 every collective, every size >= 1 KiB, no slower than Open MPI")
        self.assertEqual(s, "NOT MET")
        self.assertIn("0.80x at broadcast 64 KiB", detail)

    def test_a_missing_cell_keeps_a_target_from_being_met(self):
        med = uniform(4, 1.0, 2.5)
        del med[("chorus", 4, "reduce", 64 * MiB)]
        t = targets.check_targets(med, {}, [4], FIVE, GRID)
        s, detail = status(t, "np=4 every collective 64 MiB >= 2x Open MPI")
        self.assertEqual(s, "NOT MEASURED")
        self.assertIn("reduce 64 MiB", detail)


class Roofline(unittest.TestCase):
    def test_rows_are_busbw_with_the_collectives_factor(self):
        size = common.ROOFLINE_BYTES
        # all_gather at np=4: algbw 4.0 GB/s -> busbw 3.00; chorus 64 MiB in 20 ms, Open MPI in 40.
        med = {("chorus", 4, "all_gather", size): 20000.0, ("openmpi", 4, "all_gather", size): 40000.0,
               ("chorus", 4, "all_reduce", size): 30000.0, ("openmpi", 4, "all_reduce", size): 90000.0}
        text = report.roofline_table([4], med, {(4, "all_gather"): 4.0, (4, "broadcast"): 5.0,
                                                 (4, "broadcast/ring"): 4.5, (4, "all_reduce"): 2.0,
                                                 (4, "all_reduce/shared"): 1.6})
        rows = [l for l in text.splitlines() if l.startswith("| 4 |")]
        self.assertEqual(len(rows), 3)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        chorus_busbw = size / 20000.0 / 1e3 * 0.75
        ompi_busbw = size / 40000.0 / 1e3 * 0.75
        self.assertEqual(cells, ["4", "all_gather", "3.00 GB/s", "-", f"{chorus_busbw:.2f} GB/s",
                                 f"{ompi_busbw:.2f} GB/s", f"{3.0 / ompi_busbw:.2f}x", "-"])
        # No medians for broadcast: the rooflines are still printed (busbw = algbw), the rest "-".
        cells = [c.strip() for c in rows[1].strip("|").split("|")]
        self.assertEqual(cells, ["4", "broadcast", "5.00 GB/s", "4.50 GB/s", "-", "-", "-", "-"])
        # all_reduce at np=4: busbw = algbw x 2(n-1)/n = 1.5 algbw; both rooflines against Open MPI.
        cells = [c.strip() for c in rows[2].strip("|").split("|")]
        ompi_busbw = size / 90000.0 / 1e3 * 1.5
        self.assertEqual(cells, ["4", "all_reduce", "3.00 GB/s", "2.40 GB/s",
                                 f"{size / 30000.0 / 1e3 * 1.5:.2f} GB/s", f"{ompi_busbw:.2f} GB/s",
                                 f"{3.0 / ompi_busbw:.2f}x", f"{2.4 / ompi_busbw:.2f}x"])

    def test_all_reduce_rooflines_run_with_chorus_calls(self):
        # The all-reduce rows run as many warm-up and timed rounds as chorus-bench's calls at the
        # size (its later calls run faster), so the two stand side by side.
        seen = []
        class Done:
            returncode = 0
            stdout = "procs 2, 64 MiB each, ...: 1.00 ms per round, bytes / time 6.50 GB/s"
            stderr = ""
        real = runs.subprocess.run
        runs.subprocess.run = lambda cmd, **kw: seen.append(cmd) or Done()
        try:
            got = runs.roofline_gbps("b", 2, common.ROOFLINE_BYTES, ["--all-reduce", "--shared"], runs=1)
        finally:
            runs.subprocess.run = real
        self.assertEqual(got, 6.5)
        iters, warmup = runs.chorus_iters(common.ROOFLINE_BYTES)
        self.assertEqual(seen[0][1:], ["--procs", "2", "--bytes", str(common.ROOFLINE_BYTES),
                                       "--all-reduce", "--shared", "--iters",
                                       str(iters * runs.BLOCKS), "--warmup", str(warmup)])


if __name__ == "__main__":
    unittest.main()
