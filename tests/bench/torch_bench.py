"""PyTorch eager rows of `cargo xtask bench`: the same ops, shapes, dtypes and method as
tests/bench/src/ (candle-rocm-bench), printed in its line format so table.py can join
them. Runs on the device machine with its own python3 and PyTorch (CUDA); transformers' BERT
and LLaMA with random weights for the model rows.

The conv_models rows (ResNet-50, Whisper tiny's encoder, Stable Diffusion's VAE decoder and UNet,
written in torch.nn) are in torch_conv_models.py beside this file.

Usage: python3 tests/bench/torch_bench.py [--only WORD,...] [--decode-tokens N] [--elements N]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torch_conv_models

SAMPLES = 5
BATCH_SECONDS = 0.02


def sync():
    torch.cuda.synchronize()


def time_op(f):
    """Median seconds per call: batches of back-to-back calls closed by one synchronize."""
    for _ in range(3):
        f()
    sync()
    t = time.perf_counter()
    f()
    sync()
    one = max(time.perf_counter() - t, 1e-7)
    iters = min(max(int(BATCH_SECONDS / one), 1), 2000)
    samples = []
    for _ in range(SAMPLES):
        t = time.perf_counter()
        for _ in range(iters):
            f()
        sync()
        samples.append((time.perf_counter() - t) / iters)
    return statistics.median_low(samples)


class Bench:
    def __init__(self, only, n):
        self.only = only
        self.n = n

    def wanted(self, group, op):
        return not self.only or any(w in group or w in op for w in self.only)

    def print(self, group, op, shape, dtype, secs, work, unit):
        print(f"bench\t{group}\t{op}\t{shape}\t{dtype}\t{secs:.9e}\t{work}\t{unit}", flush=True)

    def bw(self, op, shape, dtype, nbytes, f):
        if not self.wanted("bw", op):
            return
        self.print("bw", op, shape, dtype, time_op(f), nbytes, "bytes")


NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def memory_bound(b, dtype):
    n = b.n
    s = torch.tensor([], dtype=dtype).element_size()
    dt = NAMES[dtype]
    r, c = 8192, n // 8192
    shape = f"{r}x{c}"
    x, y = randn(r, c, dtype=dtype), randn(r, c, dtype=dtype)
    row, col = randn(1, c, dtype=dtype), randn(r, 1, dtype=dtype)
    # One kernel for x * 1.5 + 0.5 (input + t1 * t2 with 0-dim operands), as Candle's affine.
    scale = torch.tensor(1.5, device="cuda", dtype=dtype)
    shift = torch.tensor(0.5, device="cuda", dtype=dtype)

    b.bw("copy", shape, dt, 2 * n * s, lambda: x.clone())
    b.bw("affine", shape, dt, 2 * n * s, lambda: torch.addcmul(shift, x, scale))
    b.bw("exp", shape, dt, 2 * n * s, lambda: torch.exp(x))
    b.bw("gelu", shape, dt, 2 * n * s, lambda: F.gelu(x, approximate="tanh"))
    b.bw("silu", shape, dt, 2 * n * s, lambda: F.silu(x))
    b.bw("add", shape, dt, 3 * n * s, lambda: x + y)
    b.bw("mul", shape, dt, 3 * n * s, lambda: x * y)
    b.bw("broadcast_add_row", shape, dt, 2 * n * s + c * s, lambda: x + row)
    b.bw("broadcast_add_col", shape, dt, 2 * n * s + r * s, lambda: x + col)
    # A per-channel operand over 14x14 planes (ResNet's batch norm at stage 3), NCHW.
    nc = n // (256 * 196)
    xc, ch = randn(nc, 256, 14, 14, dtype=dtype), randn(1, 256, 1, 1, dtype=dtype)
    b.bw("broadcast_mul_channel", f"{nc}x256x14x14", dt, 2 * nc * 256 * 196 * s + 256 * s, lambda: xc * ch)
    m = x >= 0
    b.bw("where_cond", shape, dt, n + 3 * n * s, lambda: torch.where(m, x, y))
    out = r * s
    b.bw("sum_last", shape, dt, n * s + out, lambda: x.sum(1, keepdim=True))
    b.bw("max_last", shape, dt, n * s + out, lambda: x.amax(1, keepdim=True))
    b.bw("min_last", shape, dt, n * s + out, lambda: x.amin(1, keepdim=True))
    b.bw("argmax_last", shape, dt, n * s + r * 4, lambda: x.argmax(1, keepdim=True))
    d0, d1, d2 = 256, 1024, n // (256 * 1024)
    z = x.reshape(d0, d1, d2)
    mshape = f"{d0}x{d1}x{d2}/1"
    out = d0 * d2 * s
    b.bw("sum_middle", mshape, dt, n * s + out, lambda: z.sum(1, keepdim=True))
    b.bw("max_middle", mshape, dt, n * s + out, lambda: z.amax(1, keepdim=True))
    b.bw("min_middle", mshape, dt, n * s + out, lambda: z.amin(1, keepdim=True))
    b.bw("argmax_middle", mshape, dt, n * s + d0 * d2 * 4, lambda: z.argmax(1, keepdim=True))
    b.bw("transpose_copy", shape, dt, 2 * n * s, lambda: x.t().contiguous())
    rows, width = n // 1024, 1024
    table = x.reshape(rows, width)
    picks = rows // 2
    ids = torch.randint(0, rows, (picks,), device="cuda")
    b.bw("index_select", f"{rows}x{width}[{picks}]", dt, 2 * picks * width * s + picks * 4,
         lambda: table.index_select(0, ids))
    nr, nc = n // 4096, 4096
    nshape = f"{nr}x{nc}"
    xr = x.reshape(nr, nc)
    w, bias = randn(nc, dtype=dtype), randn(nc, dtype=dtype)
    b.bw("softmax_last_dim", nshape, dt, 2 * n * s, lambda: torch.softmax(xr, -1))
    b.bw("rms_norm", nshape, dt, 2 * n * s + nc * s, lambda: F.rms_norm(xr, (nc,), w, 1e-5))
    b.bw("layer_norm", nshape, dt, 2 * n * s + 2 * nc * s,
         lambda: F.layer_norm(xr, (nc,), w, bias, 1e-5))
    bb, h, t, d = 16, 32, n // (16 * 32 * 128), 128
    q = x.reshape(bb, h, t, d)
    cos = (torch.rand(t, d // 2, device="cuda") * 2 - 1).to(dtype)
    sin = (torch.rand(t, d // 2, device="cuda") * 2 - 1).to(dtype)

    def rope():
        # Candle's `rope` (halves rotated), the way eager PyTorch code writes it.
        x1, x2 = q[..., : d // 2], q[..., d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    b.bw("rope", f"{bb}x{h}x{t}x{d}", dt, 2 * n * s + t * d * s, rope)


def casts(b):
    n = b.n
    for src, dst in [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                     (torch.float32, torch.float16), (torch.float16, torch.float32)]:
        op = f"cast_{NAMES[src]}_{NAMES[dst]}"
        x = randn(n, dtype=src)
        nbytes = n * (x.element_size() + torch.tensor([], dtype=dst).element_size())
        b.bw(op, f"{n}", NAMES[src], nbytes, lambda: x.to(dst))


def latency(b):
    x, y = randn(1024), randn(1024)
    def exp_sync():
        z = torch.exp(x)
        sync()
        return z

    def add_sync():
        z = x + y
        sync()
        return z

    for op, f in [("exp_sync", exp_sync), ("add_sync", add_sync)]:
        if b.wanted("lat", op):
            b.print("lat", op, "1024", "f32", time_op(f), 1, "calls")
    if b.wanted("lat", "enqueue"):
        n, samples = 20000, []
        for _ in range(SAMPLES):
            sync()
            t = time.perf_counter()
            for _ in range(n):
                x + y
            samples.append((time.perf_counter() - t) / n)
            sync()
        b.print("lat", "enqueue_add", "1024", "f32", statistics.median_low(samples), 1, "calls")


def matmul(b):
    for dtype in [torch.float32, torch.bfloat16, torch.float16]:
        for m, k, n in [(4096, 4096, 4096), (1, 4096, 4096)]:
            op = "matvec" if m == 1 else "matmul"
            if not b.wanted("flops", op):
                continue
            a, w = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
            s = time_op(lambda: a @ w)
            b.print("flops", op, f"{m}x{k}x{n}", NAMES[dtype], s, 2 * m * k * n, "flops")


CONV_SHAPES = [
    # (op, batch, c_in, c_out, k, (h, w), padding, stride), as tests/bench/src/conv.rs.
    ("conv2d_r50_3x3", 1, 64, 64, 3, (56, 56), 1, 1),
    ("conv2d_r50_3x3", 8, 64, 64, 3, (56, 56), 1, 1),
    ("conv2d_r50_3x3", 32, 64, 64, 3, (56, 56), 1, 1),
    ("conv2d_r50_s2_3x3", 32, 128, 128, 3, (28, 28), 1, 1),
    ("conv2d_r50_s3_3x3", 32, 256, 256, 3, (14, 14), 1, 1),
    ("conv2d_r50_s4_3x3", 32, 512, 512, 3, (7, 7), 1, 1),
    ("conv2d_r50_1x1", 1, 256, 64, 1, (56, 56), 0, 1),
    ("conv2d_r50_1x1", 32, 256, 64, 1, (56, 56), 0, 1),
    ("conv2d_r50_s2_1x1", 32, 512, 128, 1, (28, 28), 0, 1),
    ("conv2d_r50_s3_1x1", 32, 1024, 256, 1, (14, 14), 0, 1),
    ("conv2d_r50_s4_1x1", 32, 2048, 512, 1, (7, 7), 0, 1),
    ("conv2d_vae_512", 1, 512, 512, 3, (64, 64), 1, 1),
    ("conv1d_whisper", 1, 80, 384, 3, (1, 3000), 1, 1),
]


def conv(b):
    import torch.nn.functional as F

    # cuDNN may use TF32 for f32 convolutions by default; ours compute in f32: compare like
    # with like.
    torch.backends.cudnn.allow_tf32 = False
    for dtype in [torch.float32, torch.float16]:
        for op, n, c_in, c_out, k, (h, w), pad, stride in CONV_SHAPES:
            if not b.wanted("conv", op):
                continue
            one_d = op.startswith("conv1d")
            if one_d:
                x, kern = randn(n, c_in, w, dtype=dtype), randn(c_out, c_in, k, dtype=dtype)
                s = time_op(lambda: F.conv1d(x, kern, padding=pad, stride=stride))
                oh, ow, taps = 1, (w + 2 * pad - k) // stride + 1, k
            else:
                x, kern = randn(n, c_in, h, w, dtype=dtype), randn(c_out, c_in, k, k, dtype=dtype)
                s = time_op(lambda: F.conv2d(x, kern, padding=pad, stride=stride))
                oh = (h + 2 * pad - k) // stride + 1
                ow = (w + 2 * pad - k) // stride + 1
                taps = k * k
            flops = 2 * n * c_out * oh * ow * c_in * taps
            b.print("conv", op, f"{n}x{c_in}x{h}x{w}>{c_out}k{k}", NAMES[dtype], s, flops, "flops")


def bert(b):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                     num_attention_heads=12, intermediate_size=1536, hidden_act="gelu",
                     max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12)
    for dtype in [torch.float32, torch.float16]:
        for batch, seq in [(32, 128), (1, 16)]:
            op = f"bert_minilm_b{batch}"
            if not b.wanted("model", op):
                continue
            with torch.device("cuda"):
                model = BertModel(cfg).to(dtype).eval()
            ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
            tt = torch.zeros_like(ids)
            with torch.inference_mode():
                s = time_op(lambda: model(input_ids=ids, token_type_ids=tt))
            b.print("model", op, f"{batch}x{seq}", NAMES[dtype], s, batch, "sequences")


def decode(b, steps):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, vocab_size=32000,
                      num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                      rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=2048,
                      tie_word_embeddings=False)
    for dtype in [torch.float16, torch.bfloat16]:
        op = "decode_llama_1.1b"
        if not b.wanted("model", op):
            continue
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).to(dtype).eval()

        def run(steps):
            prompt = torch.tensor([[100 + 37 * i for i in range(16)]], device="cuda")
            with torch.inference_mode():
                out = model(input_ids=prompt, use_cache=True)
                past = out.past_key_values
                nxt = int(out.logits[0, -1].argmax().item())
                sync()
                t = time.perf_counter()
                for _ in range(steps):
                    inp = torch.tensor([[nxt]], device="cuda")
                    out = model(input_ids=inp, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    nxt = int(out.logits[0, -1].argmax().item())
                return (time.perf_counter() - t) / steps

        run(4)
        s = statistics.median_low([run(steps) for _ in range(3)])
        b.print("model", op, "prompt16", NAMES[dtype], s, 1, "tokens")
        del model
        torch.cuda.empty_cache()


def attention(b):
    """The `attn` rows of tests/bench/src/attention.rs: scaled_dot_product_attention with its
    flash backend (prefill) or the backend PyTorch picks for GQA decode, under the `*-flash`
    names; the eager matmul path under `*-matmul`."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def manual(q, k, v, causal):
        att = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        if causal:
            sq, sk = q.shape[-2], k.shape[-2]
            mask = torch.ones(sq, sk, device="cuda", dtype=torch.bool).tril(sk - sq)
            att = att.masked_fill(~mask, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            h = 2048 // d
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                batch = 16384 // s
                for causal in (False, True):
                    shape = f"b{batch}h{h}s{s}d{d}{'c' if causal else ''}"
                    flops = 4.0 * batch * h * s * s * d / (2.0 if causal else 1.0)
                    q, k, v = (randn(batch, h, s, d, dtype=dtype) for _ in range(3))
                    if b.wanted("attn", "prefill-flash"):
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            t = time_op(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                        b.print("attn", "prefill-flash", shape, NAMES[dtype], t, flops, "flops")
                    if b.wanted("attn", "prefill-matmul") and batch * h * s * s < 2**31:
                        t = time_op(lambda: manual(q, k, v, causal))
                        b.print("attn", "prefill-matmul", shape, NAMES[dtype], t, flops, "flops")
    h, hk, d = 32, 8, 128
    for kv in (512, 1024, 2048, 4096, 8192, 16384, 32768):
        dtype = torch.float16
        shape = f"h{h}kv{hk}d{d}n{kv}"
        nbytes = 2 * kv * hk * d * 2
        q = randn(1, h, 1, d, dtype=dtype)
        k, v = randn(1, hk, kv, d, dtype=dtype), randn(1, hk, kv, d, dtype=dtype)
        if b.wanted("attn", "decode-flash"):
            t = time_op(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            b.print("attn", "decode-flash", shape, NAMES[dtype], t, nbytes, "bytes")
        if b.wanted("attn", "decode-matmul"):
            kr, vr = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
            t = time_op(lambda: manual(q, kr, vr, False))
            b.print("attn", "decode-matmul", shape, NAMES[dtype], t, nbytes, "bytes")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="")
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--elements", type=int, default=1 << 26)
    a = p.parse_args()
    b = Bench([w for w in a.only.split(",") if w], a.elements)
    print(f"device\tpytorch-{torch.__version__}\t{torch.cuda.get_device_name(0)}", flush=True)
    for dtype in [torch.float32, torch.bfloat16]:
        memory_bound(b, dtype)
    casts(b)
    latency(b)
    matmul(b)
    conv(b)
    torch_conv_models.conv_models(b)
    bert(b)
    attention(b)
    decode(b, a.decode_tokens)


if __name__ == "__main__":
    main()
