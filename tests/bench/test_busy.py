"""Unit tests of tests/hip-on-cuda/busy.py (GPU busy time per decode step from libhoc_busy.so's
CUPTI timeline): the interval union, the window of decode steps the step kernel marks, and the
figures of a small synthetic busy.tsv whose answer is worked out by hand below.

Run: python3 -m unittest discover -s tests/bench -p 'test_*.py'
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUSY_DIR = os.path.join(HERE, "..", "hip-on-cuda")
sys.path.insert(0, BUSY_DIR)

import busy  # noqa: E402


def synthetic_trace():
    """A busy.tsv as libhoc_busy.so writes it: setup, a prompt ending with an argmax, then four
    decode steps 10 us apart. Step i (t = 30000 + 10000 (i - 1) ns):
      gemv_f16_1_v       [t, t+4000]       stream 7
      rmsnorm_f16        [t+1000, t+2000]  stream 8 (nested in the gemv)
      softmax_f16        [t+3500, t+5000]  stream 7 (overlaps the gemv by 500)
      fast_argmax_f16    [t+5000, t+6000]  the step's end (boundary)
      memcpy_DtoH        [t+6500, t+7000]  the read-back
    then idle until the next step. Boundaries: 21000 (prompt), 36000, 46000, 56000, 66000.
    Records are written out of time order, as CUPTI's buffers may come."""
    lines = [
        "# hoc_busy\tpid 1\tCUPTI API 130001\tkind\tstart_ns\tend_ns\tstream_id\tname",
        "kernel\t1000\t5000\t7\tfill_f16",
        "memset\t5000\t6000\t7\tmemset",
        "kernel\t10000\t20000\t7\tgemm_prompt",
        "kernel\t20000\t21000\t7\tfast_argmax_f16",
        "memcpy\t21500\t22000\t7\tmemcpy_DtoH",
    ]
    steps = []
    for i in range(4):
        t = 30000 + 10000 * i
        steps.append([
            f"kernel\t{t}\t{t + 4000}\t7\tgemv_f16_1_v",
            f"kernel\t{t + 1000}\t{t + 2000}\t8\trmsnorm_f16",
            f"kernel\t{t + 3500}\t{t + 5000}\t7\tsoftmax_f16",
            f"kernel\t{t + 5000}\t{t + 6000}\t7\tfast_argmax_f16",
            f"memcpy\t{t + 6500}\t{t + 7000}\t7\tmemcpy_DtoH",
        ])
    for s in reversed(steps):
        lines.extend(s)
    lines.append("# end\tkernels 18 (in graphs 16)\tmemcpy 5\tmemset 1\tother 0\tdropped 0"
                 "\tcupti_errors 0")
    return [line + "\n" for line in lines]


class UnionTest(unittest.TestCase):
    def test_disjoint_intervals_add_up(self):
        self.assertEqual(busy.union_length([(0, 10), (20, 25)]), 15)

    def test_overlap_counts_once(self):
        self.assertEqual(busy.union_length([(0, 10), (5, 15)]), 15)

    def test_nested_interval_adds_nothing(self):
        self.assertEqual(busy.union_length([(0, 100), (10, 20), (30, 90)]), 100)

    def test_touching_intervals_join(self):
        self.assertEqual(busy.union_length([(10, 20), (0, 10)]), 20)

    def test_gaps_and_unsorted_input(self):
        self.assertEqual(busy.union_length([(50, 60), (0, 10), (5, 12), (55, 70)]), 32)

    def test_empty_and_degenerate(self):
        self.assertEqual(busy.union_length([]), 0)
        self.assertEqual(busy.union_length([(5, 5), (7, 6)]), 0)

    def test_clipped_to_window(self):
        # (0, 10) straddles the start, (90, 120) the end, (200, 300) lies outside
        iv = [(0, 10), (40, 50), (90, 120), (200, 300)]
        self.assertEqual(busy.union_length(iv, 5, 100), 5 + 10 + 10)
        self.assertEqual(busy.clip(iv, 5, 100), [(5, 10), (40, 50), (90, 100)])

    def test_interval_covering_the_window(self):
        self.assertEqual(busy.union_length([(0, 1000)], 100, 300), 200)


class WindowTest(unittest.TestCase):
    def setUp(self):
        self.records, self.notes = busy.parse(synthetic_trace())

    def test_parse_sorts_and_keeps_every_record(self):
        self.assertEqual(len(self.records), 6 + 4 * 5 - 1)
        starts = [r.start for r in self.records]
        self.assertEqual(starts, sorted(starts))
        self.assertEqual(self.records[0], busy.Record("kernel", 1000, 5000, 7, "fill_f16"))
        self.assertTrue(self.notes["ended"])
        self.assertEqual(self.notes["dropped"], 0)

    def test_boundaries_are_argmax_ends(self):
        self.assertEqual(busy.step_boundaries(self.records, "argmax"),
                         [21000, 36000, 46000, 56000, 66000])

    def test_step_kernel_is_a_case_insensitive_regex(self):
        self.assertEqual(busy.step_boundaries(self.records, "ARGMAX_f16$"),
                         [21000, 36000, 46000, 56000, 66000])
        self.assertEqual(busy.step_boundaries(self.records, "^gemv"),
                         [34000, 44000, 54000, 64000])

    def test_consecutive_matches_are_one_boundary(self):
        recs = [busy.Record("kernel", 10, 20, 0, "a"),
                busy.Record("kernel", 20, 30, 0, "argmax_part"),
                busy.Record("memcpy", 31, 32, 0, "memcpy_DtoH"),  # a copy does not split
                busy.Record("kernel", 33, 40, 0, "argmax_final"),
                busy.Record("kernel", 50, 60, 0, "b"),
                busy.Record("kernel", 60, 70, 0, "argmax_part")]
        self.assertEqual(busy.step_boundaries(recs, "argmax"), [40, 70])

    def test_default_window_skips_the_first_step(self):
        ends = busy.step_boundaries(self.records, "argmax")
        self.assertEqual(busy.select_window(ends), (36000, 66000, 3))

    def test_window_of_n_steps(self):
        ends = busy.step_boundaries(self.records, "argmax")
        self.assertEqual(busy.select_window(ends, skip=1, steps=2), (36000, 56000, 2))
        self.assertEqual(busy.select_window(ends, skip=0), (21000, 66000, 4))

    def test_too_few_steps_is_an_error(self):
        ends = busy.step_boundaries(self.records, "argmax")
        with self.assertRaises(busy.BusyError):
            busy.select_window(ends, skip=1, steps=4)
        with self.assertRaises(busy.BusyError):
            busy.select_window([100], skip=0)
        with self.assertRaises(busy.BusyError):
            busy.summarize(self.records, pattern="no_such_kernel")


class FigureTest(unittest.TestCase):
    def setUp(self):
        self.records, self.notes = busy.parse(synthetic_trace())

    def test_busy_of_the_default_window(self):
        # Window [36000, 66000]: step 1's read-back 500, steps 2 and 3 6000 + 500 each, step 4
        # 6000 (its read-back ends after the window): 19500 of 30000 ns over 3 steps.
        f = busy.summarize(self.records)
        self.assertEqual(f["steps"], 3)
        self.assertAlmostEqual(f["window_us"], 30.0)
        self.assertAlmostEqual(f["us_per_step"], 10.0)
        self.assertAlmostEqual(f["busy_us_per_step"], 6.5)
        self.assertAlmostEqual(f["busy_pct"], 65.0)
        self.assertAlmostEqual(f["idle_us_per_step"], 3.5)
        self.assertAlmostEqual(f["kernels_per_step"], 4.0)
        self.assertAlmostEqual(f["memcpys_per_step"], 1.0)
        # kernel time counts overlaps twice: 4000 + 1000 + 1500 + 1000 per step
        self.assertAlmostEqual(f["kernel_us_per_step"], 7.5)
        self.assertAlmostEqual(f["step_us_median"], 10.0)

    def test_busy_from_the_prompt_and_of_two_steps(self):
        # [21000, 66000]: the prompt's read-back 500, step 1 6500 and the rest as above.
        f = busy.summarize(self.records, skip=0)
        self.assertAlmostEqual(f["busy_pct"], 100.0 * 26000 / 45000)
        f = busy.summarize(self.records, skip=1, steps=2)
        self.assertAlmostEqual(f["busy_pct"], 100.0 * 13000 / 20000)

    def test_top_kernels(self):
        top = busy.summarize(self.records, top=3)["top"]
        self.assertEqual([name for name, _ in top], ["gemv_f16_1_v", "softmax_f16", "fast_argmax_f16"])
        self.assertEqual(top[0][1], [3, 3 * 4000])

    def test_setup_and_prompt_are_outside_the_window(self):
        names = {name for name, _ in busy.summarize(self.records, top=100)["top"]}
        self.assertNotIn("fill_f16", names)
        self.assertNotIn("gemm_prompt", names)
        self.assertNotIn("memset", names)

    def test_a_long_step_is_flagged(self):
        lines = synthetic_trace()
        # a fifth step after a 1 ms pause (a second pass's prompt, say)
        t = 1_070_000
        lines[-1:-1] = [f"kernel\t{t}\t{t + 4000}\t7\tgemv_f16_1_v\n",
                        f"kernel\t{t + 5000}\t{t + 6000}\t7\tfast_argmax_f16\n"]
        recs, notes = busy.parse(lines)
        f = busy.summarize(recs)
        self.assertTrue(any("may span" in w for w in busy.warnings(f, notes)))
        self.assertFalse(busy.warnings(busy.summarize(self.records), self.notes))


class ParseTest(unittest.TestCase):
    def test_notes_bad_lines_and_incomplete_records(self):
        recs, notes = busy.parse([
            "# hoc_busy\tpid 1\n",
            "kernel\t100\t200\t1\tk\n",
            "kernel\t0\t0\t1\tincomplete\n",       # CUPTI's unknown timestamp
            "kernel\t300\t250\t1\tbackwards\n",
            "nonsense line\n",
            "# dropped\t12\tWARNING: CUPTI dropped 12 records (stream 0)\n",
            "memset\t400\t500\t2\tmemset\n",
        ])
        self.assertEqual([r.name for r in recs], ["k", "memset"])
        self.assertEqual(notes["dropped"], 12)
        self.assertEqual(notes["bad"], 3)
        self.assertFalse(notes["ended"])
        w = busy.warnings(None, notes)
        self.assertTrue(any("dropped 12" in x for x in w))
        self.assertTrue(any("no end line" in x for x in w))

    def test_kernel_names_with_spaces_are_kept_whole(self):
        recs, _ = busy.parse(["kernel\t1\t2\t0\tvoid gemv<float, 4>(float const*, int)\n"])
        self.assertEqual(recs[0].name, "void gemv<float, 4>(float const*, int)")

    def test_cupti_errors_from_the_end_line(self):
        _, notes = busy.parse(["# end\tkernels 0 (in graphs 0)\tmemcpy 0\tmemset 0\tother 0"
                               "\tdropped 0\tcupti_errors 4\n"])
        self.assertTrue(notes["ended"])
        self.assertEqual(notes["cupti_errors"], 4)


class CommandLineTest(unittest.TestCase):
    def run_busy(self, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "busy.tsv")
            with open(path, "w") as f:
                f.writelines(synthetic_trace())
            return subprocess.run([sys.executable, os.path.join(BUSY_DIR, "busy.py"), path, *args],
                                  capture_output=True, text=True)

    def test_tsv_output(self):
        p = self.run_busy("--tsv", "--steps", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        fig = dict(line.split("\t") for line in p.stdout.splitlines())
        self.assertEqual(fig["steps"], "2")
        self.assertEqual(fig["busy_pct"], "65.00")
        self.assertEqual(fig["window_us"], "20.00")
        self.assertEqual(fig["kernels_per_step"], "4.00")
        self.assertEqual(fig["dropped"], "0")

    def test_report(self):
        p = self.run_busy()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"busy %\s+65\.0\b")
        self.assertRegex(p.stdout, r"kernels per step\s+4\.0\b")
        self.assertIn("gemv_f16_1_v", p.stdout)

    def test_too_many_steps_fails(self):
        p = self.run_busy("--steps", "9")
        self.assertEqual(p.returncode, 1)
        self.assertIn("9 asked for", p.stderr)


if __name__ == "__main__":
    unittest.main()
