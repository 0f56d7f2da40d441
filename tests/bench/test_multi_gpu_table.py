"""Unit tests of table.py --multi-gpu (the rows of several GPUs: candle-rocm-bench --gpus N and
torch_mgpu.py), and that torch_mgpu.py times the sizes and schedule ours does (read from both
sources: no torch needed).

Run: python3 -m unittest discover -s tests/bench -p 'test_*.py'
"""

import ast
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import table  # noqa: E402

MIB = 1 << 20

OURS = """device\tcandle-rocm\tExt { backend: "rocm", ordinal: 0 }
bench\tmgpu_p2p\tto_device_0to1\t256MiB\tf32\t1.0e-3\t268435456\tbytes
bench\tmgpu_tp\tprefill_llama_7b\t1gpu_32l\tf16\t1.0e-1\t512\ttokens
bench\tmgpu_tp\tdecode_llama_7b\t1gpu_32l\tf16\t1.0e-2\t1\ttokens
bench\tmgpu_tp\tdecode_llama_7b\t1gpu_2l\tf16\t2.0e-3\t1\ttokens
bench\tmgpu_allreduce\tall_reduce_2gpu\t1MiB\tf32\t4.0e-5\t1048576\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t64MiB\tf32\t2.0e-4\t67108864\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t256MiB\tf16\t1.0e-3\t268435456\tbytes
bench\tmgpu_tp\tprefill_llama_7b\t2gpu_32l\tf16\t5.0e-2\t512\ttokens
bench\tmgpu_tp\tdecode_llama_7b\t2gpu_32l\tf16\t8.0e-3\t1\ttokens
"""

TORCH = """device\tpytorch-2.9.0 nccl-2.27.7\t2x NVIDIA H100 80GB HBM3
bench\tmgpu_p2p\tto_device_0to1\t256MiB\tf32\t7.0e-4\t268435456\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t1MiB\tf32\t2.0e-5\t1048576\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t64MiB\tf32\t1.9e-4\t67108864\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t256MiB\tf16\t8.0e-4\t268435456\tbytes
bench\tmgpu_allreduce\tall_reduce_2gpu\t1024MiB\tf16\t3.0e-3\t1073741824\tbytes
"""


def rows_of(text):
    """{first cell + size cell: [cells]} of the Markdown table rows in text."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| op "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[(cells[0], cells[1], cells[2])] = cells
    return out


class MultiGpuTable(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ours = os.path.join(self.dir.name, "ours-mgpu.tsv")
        self.torch = os.path.join(self.dir.name, "torch-mgpu.tsv")
        with open(self.ours, "w") as f:
            f.write(OURS)
        with open(self.torch, "w") as f:
            f.write(TORCH)

    def tearDown(self):
        self.dir.cleanup()

    def table(self):
        (dev_o, ours), (dev_t, torch) = table.read(self.ours), table.read(self.torch)
        return table.multi_gpu_table("t", dev_o, ours, dev_t, torch)

    def test_allreduce_rows_give_bus_bandwidth_ratio_and_target_from_64_mib(self):
        rows = rows_of(self.table())
        small = rows[("all_reduce_2gpu", "1MiB", "f32")]
        # 1 MiB of bus bytes in 40 us: 26.2 GB/s; PyTorch 52.4; ratio 20/40.
        self.assertEqual(small[3:8], ["26.2", "52.4", "GB/s", "0.50", "-"])
        big = rows[("all_reduce_2gpu", "64MiB", "f32")]
        self.assertEqual(big[6:8], ["0.95", ">= 0.90: met"])
        f16 = rows[("all_reduce_2gpu", "256MiB", "f16")]
        self.assertEqual(f16[6:8], ["0.80", ">= 0.90: missed"])
        # A row PyTorch ran and ours did not: no ratio, the target not measured.
        lone = rows[("all_reduce_2gpu", "1024MiB", "f16")]
        self.assertEqual(lone[3], "-")
        self.assertEqual(lone[7], ">= 0.90: not measured")

    def test_copies_compare_with_pytorch_against_their_target(self):
        rows = rows_of(self.table())
        copy = rows[("to_device_0to1", "256MiB", "f32")]
        self.assertEqual(copy[3:8], ["268", "383", "GB/s", "0.70", ">= 0.80: missed"])

    def test_tensor_parallel_rows_give_the_speedup_over_one_gpu(self):
        text = self.table()
        rows = rows_of(text)
        decode = rows[("decode_llama_7b", "32l", "f16")]
        # 100 tok/s on 1 GPU, 125 on 2: 1.25x, under 1.5.
        self.assertEqual(decode[3:9], ["100", "125", "2", "tok/s", "1.25", ">= 1.50: missed"])
        prefill = rows[("prefill_llama_7b", "32l", "f16")]
        self.assertEqual(prefill[3:9], ["5120", "10240", "2", "tok/s", "2.00", ">= 1.70: met"])
        # A 1-GPU row without its N-GPU row stands alone.
        alone = rows[("decode_llama_7b", "2l", "f16")]
        self.assertEqual(alone[3:5], ["500", "-"])
        # met: 64 MiB all-reduce, prefill; of: 3 all-reduce rows >= 64 MiB, the copy, 2 tp rows.
        self.assertIn("Targets met: 2 of 6.", text)

    def test_the_command_line_prints_it_alone(self):
        out = subprocess.run(
            [sys.executable, os.path.join(os.path.dirname(table.__file__), "table.py"),
             "--multi-gpu", self.ours, self.torch, "--title", "H100 x2"],
            check=True, capture_output=True, text=True).stdout
        self.assertTrue(out.startswith("## H100 x2: several GPUs"), out)
        self.assertIn("- PyTorch: pytorch-2.9.0 nccl-2.27.7 2x NVIDIA H100 80GB HBM3", out)
        self.assertNotIn("Candle CUDA", out)

    def test_missing_positionals_are_refused_without_multi_gpu(self):
        r = subprocess.run(
            [sys.executable, os.path.join(os.path.dirname(table.__file__), "table.py")],
            capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--multi-gpu", r.stderr)


HERE = os.path.dirname(os.path.abspath(__file__))


def torch_constants():
    """torch_mgpu.py's module-level constants (literals only) and iters_for, without importing
    torch."""
    with open(os.path.join(HERE, "torch_mgpu.py")) as f:
        tree = ast.parse(f.read())
    consts, ns = {}, {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, AttributeError):
                pass
        if isinstance(node, ast.FunctionDef) and node.name == "iters_for":
            exec(compile(ast.Module(body=[node], type_ignores=[]), "torch_mgpu.py", "exec"), ns)
    return consts, ns["iters_for"]


def rust_const(path, name):
    """The integers of `const NAME: ... = <value>;` in a Rust source under src/mgpu/."""
    with open(os.path.join(HERE, "src", "mgpu", path)) as f:
        m = re.search(rf"const {name}: [^=]+= ([^;]+);", f.read())
    assert m, f"no const {name} in {path}"
    return [int(x) for x in re.findall(r"\d+", m.group(1))]


class TorchScriptMatchesOurs(unittest.TestCase):
    def test_sizes_warmup_samples_and_iterations(self):
        consts, iters_for = torch_constants()
        self.assertEqual(list(consts["ALLREDUCE_KIB"]), rust_const("allreduce.rs", "SIZES_KIB"))
        self.assertEqual(list(consts["P2P_MIB"]), rust_const("p2p.rs", "SIZES_MIB"))
        self.assertEqual([consts["WARMUP"]], rust_const("mod.rs", "WARMUP"))
        self.assertEqual([consts["SAMPLES"]], rust_const("mod.rs", "SAMPLES"))
        # mgpu::tests::schedules_match_the_torch_script holds ours to these counts.
        self.assertEqual([iters_for(m * MIB) for m in (1, 16, 64, 256, 1024)],
                         [200, 200, 64, 16, 5])


if __name__ == "__main__":
    unittest.main()
