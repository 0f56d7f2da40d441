"""Unit tests of llamacpp_rows.py (llama-bench JSON -> our rows) and table.py's --peer table.

Run: python3 -m unittest discover -s tests/bench -p 'test_*.py'
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llamacpp_rows  # noqa: E402
import table  # noqa: E402


def test_entry(model, n_prompt, n_gen, fa, avg_ts):
    """One test as llama-bench's json_printer writes it (llama-cpp-python 0.3.36's llama.cpp:
    the fields of test::get_fields, then samples_ns and samples_ts)."""
    avg_ns = int(1e9 * (n_prompt + n_gen) / avg_ts)
    return {
        "build_commit": "unknown", "build_number": 0,
        "cpu_info": "Intel(R) Xeon(R) Platinum 8480+", "gpu_info": "NVIDIA H100 80GB HBM3",
        "backends": "CUDA", "model_filename": model, "model_type": "llama 1B Q4_0",
        "model_size": 615735296, "model_n_params": 1100048384, "n_batch": 2048,
        "n_ubatch": 512, "n_threads": 16, "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,
        "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "n_cpu_moe": 0,
        "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False, "flash_attn": fa,
        "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
        "load_mode": "mmap", "lazy_mode": "none", "embeddings": False, "no_op_offload": 0,
        "no_host": False, "repack": True, "fit_target": 1024, "fit_min_ctx": 4096,
        "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0,
        "test_time": "2026-11-26T08:00:00Z", "avg_ns": avg_ns, "stddev_ns": 1000,
        "avg_ts": avg_ts, "stddev_ts": 1.5,
        "samples_ns": [avg_ns] * 5, "samples_ts": [avg_ts] * 5,
    }


SAMPLE = [
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-q4_0.gguf", 512, 0, 0, 40000.0),
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-q4_0.gguf", 0, 128, 0, 710.0),
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-q4_0.gguf", 512, 0, 1, 45000.0),
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-q4_0.gguf", 0, 128, 1, 925.0),
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-f16.gguf", 0, 128, 1, 500.0),
    test_entry("/tmp/hip-on-cuda/gguf/gguf-1.1b-f16.gguf", 512, 0, 1, 30000.0),
    test_entry("/tmp/cache/smollm2-135m-q4_1.gguf", 0, 128, 1, 1500.0),
    test_entry("/tmp/cache/smollm2-135m-q4_1.gguf", 512, 128, 1, 900.0),  # -pg: no row
]


class Keys(unittest.TestCase):
    def test_synthetic_files_take_our_row_keys(self):
        f = "/x/gguf-1.1b-q4_k_m.gguf"
        self.assertEqual(llamacpp_rows.key(f, 512, 0),
                         ("model", "gguf_prefill_1.1b_q4_k_m", "prompt512", "f32"))
        self.assertEqual(llamacpp_rows.key(f, 0, 128),
                         ("model", "gguf_decode_1.1b_q4_k_m", "prompt16", "f32"))

    def test_the_f16_decode_sits_beside_our_f16_decode(self):
        self.assertEqual(llamacpp_rows.key("gguf-1.1b-f16.gguf", 0, 128),
                         ("model", "decode_llama_1.1b", "prompt16", "f16"))

    def test_real_files_take_the_file_rows(self):
        self.assertEqual(llamacpp_rows.key("/c/gemma-3-270m-q4_k_m.gguf", 512, 0),
                         ("model", "gguf_prefill_file", "prompt512 gemma-3-270m-q4_k_m.gguf",
                          "f32"))
        self.assertEqual(llamacpp_rows.key("/c/gemma-3-270m-q4_k_m.gguf", 0, 128),
                         ("model", "gguf_decode_file", "prompt16 gemma-3-270m-q4_k_m.gguf",
                          "f32"))

    def test_prompt_and_generation_together_has_no_row(self):
        self.assertIsNone(llamacpp_rows.key("gguf-1.1b-q4_0.gguf", 512, 128))

    def test_decode_at_depth_sits_beside_our_long_prompt_rows(self):
        self.assertEqual(llamacpp_rows.key("gguf-1.1b-q4_0.gguf", 0, 128, 2048),
                         ("model", "gguf_decode_1.1b_q4_0", "prompt2048", "f32"))
        self.assertEqual(llamacpp_rows.key("gguf-1.1b-q4_0.gguf", 0, 128, 0),
                         ("model", "gguf_decode_1.1b_q4_0", "prompt16", "f32"))
        self.assertEqual(llamacpp_rows.key("gguf-1.1b-q4_0.gguf", 0, 128, 2048, flash=True),
                         ("model", "gguf_decode_1.1b_q4_0_flash", "prompt2048", "f32"))
        self.assertEqual(llamacpp_rows.key("gguf-1.1b-f16.gguf", 0, 128, flash=True),
                         ("model", "decode_llama_1.1b_flash", "prompt16", "f16"))
        # Real files: our rows of a file have no flash variant.
        self.assertEqual(llamacpp_rows.key("/c/smollm2.gguf", 0, 128, flash=True),
                         ("model", "gguf_decode_file", "prompt16 smollm2.gguf", "f32"))
        # A prefill at depth has no row of ours.
        self.assertIsNone(llamacpp_rows.key("gguf-1.1b-q4_0.gguf", 512, 0, 2048))


class Rows(unittest.TestCase):
    def test_rows_split_by_flash_attention(self):
        by_fa, device = llamacpp_rows.rows(SAMPLE)
        fa1 = dict(by_fa[1])
        fa0 = dict(by_fa[0])
        self.assertEqual(len(fa0), 2)
        self.assertEqual(len(fa1), 5)
        self.assertAlmostEqual(fa1[("model", "gguf_decode_1.1b_q4_0_flash", "prompt16", "f32")],
                               1 / 925.0)
        self.assertAlmostEqual(fa0[("model", "gguf_prefill_1.1b_q4_0", "prompt512", "f32")],
                               1 / 40000.0)
        self.assertIn("flash attention on", device[1])
        self.assertIn("NVIDIA H100", device[1])

    def test_files_round_trip_through_table_read(self):
        with tempfile.TemporaryDirectory() as d:
            inp = os.path.join(d, "bench-1.json")
            with open(inp, "w") as f:
                json.dump(SAMPLE, f, indent=2)
            empty = os.path.join(d, "bench-2.json")
            open(empty, "w").close()  # a run that printed nothing
            prefix = os.path.join(d, "llamacpp")
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                  "llamacpp_rows.py")
            subprocess.run([sys.executable, script, prefix, inp, empty], check=True,
                           capture_output=True)
            dev, rows = table.read(prefix + "-fa1.tsv")
            self.assertIn("flash attention on", dev)
            secs, work, unit = rows[("model", "gguf_decode_1.1b_q4_0_flash", "prompt16", "f32")]
            tok_s, unit = table.value((secs, work, unit))
            self.assertEqual(unit, "tok/s")
            self.assertAlmostEqual(tok_s, 925.0, places=3)
            _, rows0 = table.read(prefix + "-fa0.tsv")
            self.assertEqual(len(rows0), 2)
            with open(prefix + ".json") as f:
                self.assertEqual(len(json.load(f)), len(SAMPLE))


class RealOutput(unittest.TestCase):
    """testdata/llama-bench-cpu-1.1b.json: what llama-bench of the pinned llama.cpp printed
    (`-fa 1 -p 4 -n 1 -r 1 -o json`, a CPU build) on the three 1.1B files
    `candle-rocm-bench --write-gguf` writes."""

    def test_rows_of_real_llama_bench_output(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                            "llama-bench-cpu-1.1b.json")
        tests = llamacpp_rows.load([path])
        self.assertEqual([t["model_type"] for t in tests[::2]],
                         ["llama 1B Q4_0", "llama 1B Q4_K - Medium", "llama 1B F16"])
        by_fa, device = llamacpp_rows.rows(tests)
        self.assertEqual(by_fa[0], [])
        self.assertEqual([k for k, _ in by_fa[1]], [
            ("model", "gguf_prefill_1.1b_q4_0_flash", "prompt4", "f32"),
            ("model", "gguf_decode_1.1b_q4_0_flash", "prompt16", "f32"),
            ("model", "gguf_prefill_1.1b_q4_k_m_flash", "prompt4", "f32"),
            ("model", "gguf_decode_1.1b_q4_k_m_flash", "prompt16", "f32"),
            ("model", "prefill_llama_1.1b_flash", "prompt4", "f16"),
            ("model", "decode_llama_1.1b_flash", "prompt16", "f16"),
        ])
        for t, (_, secs) in zip(tests, by_fa[1]):
            self.assertAlmostEqual(secs, 1.0 / t["avg_ts"])
        self.assertIn("CPU", device[1])


class PeerTable(unittest.TestCase):
    def test_peer_rows_beside_ours(self):
        k = ("model", "gguf_decode_1.1b_q4_0", "prompt16", "f32")
        ours = {k: (1 / 419.0, 1.0, "tokens")}
        cuda = {k: (1 / 186.0, 1.0, "tokens")}
        peers = [("llama.cpp FA on", "llama.cpp x", {k: (1 / 925.0, 1.0, "tokens")}),
                 ("llama.cpp FA off", "llama.cpp y", {k: (1 / 710.0, 1.0, "tokens")})]
        out = table.peer_table(ours, cuda, peers)
        row = [line for line in out.splitlines() if line.startswith("| gguf_decode_1.1b_q4_0")]
        self.assertEqual(
            row, ["| gguf_decode_1.1b_q4_0 | prompt16 | f32 | tok/s | 419 | 186 | 925 | 710 "
                  "| 0.45 | 0.59 |"])


if __name__ == "__main__":
    unittest.main()
