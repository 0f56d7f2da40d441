"""The `conv_models` rows of torch_bench.py: the models of tests/bench/src/conv_models.rs
written in torch.nn (the device machine has no diffusers or torchvision, and no network), with
the same layers and channel counts as the candle-transformers models the Rust rows build, on
random weights, one forward pass per row in milliseconds per call.

Reference configurations (what both sides follow):
- sd15_vae_decode: Stable Diffusion 1.5's VAE decoder (runwayml/stable-diffusion-v1-5
  vae/config.json; candle-transformers' `StableDiffusionConfig::v1_5` autoencoder): channels
  128/256/512/512, 2 layers per block (3 resnets per up block), a single-head attention in the
  mid block, group norm of 32 groups with eps 1e-6, post-quant 1x1 conv; latent 1x4x64x64.
- sd15_unet_step: its UNet (unet/config.json; `v1_5`'s unet): channels 320/640/1280/1280, the
  first three down blocks (and last three up blocks) with one transformer of 8 heads and
  cross-attention to 768-wide text states, 2 layers per block, group norm 32 with eps 1e-5,
  conv projections in and out of the transformers; a batch of 2 latents 4x64x64 (classifier-free
  guidance) with 2x77x768 text states.
- resnet50_b1, resnet50_b32: ResNet-50 v1.5 (the stride on the 3x3 conv of a bottleneck, as
  torchvision's and candle-transformers' `resnet50`), 1000 classes, 224x224 images.
- whisper_tiny_encoder: Whisper tiny's audio encoder (openai/whisper-tiny config.json): two
  conv1d (80->384, k3; 384->384, k3 stride 2) with GELU, sinusoidal positions, 4 pre-norm
  transformer blocks of width 384, 6 heads, MLP 1536, a final layer norm; 30 s of mel,
  1x80x3000, f32 and f16 as the Rust rows (f16 since candle-transformers patch 0006).

Attention runs through F.scaled_dot_product_attention, as diffusers' and transformers' default
attention processors do. Every row comes twice: with torch.backends.cudnn.benchmark off
(PyTorch's default; op as in the Rust rows, so table.py puts ours beside it) and on (op suffixed
`_cudnn_benchmark`: cuDNN times its algorithms for each new shape in the untimed first call).
TF32 is off for convolutions and matrix products: ours computes f32 in f32.
"""

import math
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

GROUP = "conv_models"
MODEL_SAMPLES = 3
MODEL_BATCH_SECONDS = 0.1
NAMES = {torch.float32: "f32", torch.float16: "f16"}
VAE_PARAMS = 49_490_199
UNET_PARAMS = 859_520_964
RESNET50_PARAMS = 25_557_032
WHISPER_PARAMS = 7_632_384


def time_model(f):
    """Median seconds per call, as conv_models.rs's time_model: one untimed call, one to size
    the batches, then MODEL_SAMPLES batches of back-to-back calls closed by a synchronize."""
    f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    f()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t, 1e-7)
    iters = min(max(int(MODEL_BATCH_SECONDS / one), 1), 50)
    samples = []
    for _ in range(MODEL_SAMPLES):
        t = time.perf_counter()
        for _ in range(iters):
            f()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t) / iters)
    return statistics.median_high(samples)


def conv3(c_in, c_out, stride=1):
    return nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1)


class Resnet(nn.Module):
    """SD's ResnetBlock2D: norm, SiLU, conv, (+ time embedding), norm, SiLU, conv, 1x1
    shortcut when the width changes."""

    def __init__(self, c_in, c_out, eps, temb=None):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, c_in, eps), conv3(c_in, c_out)
        self.norm2, self.conv2 = nn.GroupNorm(32, c_out, eps), conv3(c_out, c_out)
        self.temb = nn.Linear(temb, c_out) if temb else None
        self.shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x, temb=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if self.temb is not None:
            h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.shortcut(x) + h


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = conv3(c, c)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class VaeAttention(nn.Module):
    """The VAE mid block's single-head self-attention over the pixels."""

    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, 1e-6)
        self.q, self.k, self.v, self.out = (nn.Linear(c, c) for _ in range(4))

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = (m(t)[:, None] for m in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v)[:, 0]
        return x + self.out(o).transpose(1, 2).reshape(b, c, h, w)


class VaeDecoder(nn.Module):
    """SD 1.5's VAE decoder with its post-quant conv (AutoencoderKL.decode)."""

    def __init__(self, channels=(128, 256, 512, 512), layers=2, latent=4):
        super().__init__()
        top = channels[-1]
        self.post_quant = nn.Conv2d(latent, latent, 1)
        self.conv_in = conv3(latent, top)
        self.mid = nn.ModuleList([Resnet(top, top, 1e-6), VaeAttention(top), Resnet(top, top, 1e-6)])
        self.ups = nn.ModuleList()
        prev = top
        rev = list(reversed(channels))
        for i, c in enumerate(rev):
            blocks = [Resnet(prev if j == 0 else c, c, 1e-6) for j in range(layers + 1)]
            if i + 1 < len(rev):
                blocks.append(Upsample(c))
            self.ups.append(nn.Sequential(*blocks))
            prev = c
        self.norm_out = nn.GroupNorm(32, channels[0], 1e-6)
        self.conv_out = conv3(channels[0], 3)

    def forward(self, z):
        x = self.conv_in(self.post_quant(z))
        for m in self.mid:
            x = m(x)
        for up in self.ups:
            x = up(x)
        return self.conv_out(F.silu(self.norm_out(x)))


class CrossAttention(nn.Module):
    def __init__(self, dim, context, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(context, dim, bias=False)
        self.v = nn.Linear(context, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, ctx):
        b, n, d = x.shape

        def split(t):
            return t.view(b, -1, self.heads, d // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(ctx)), split(self.v(ctx)))
        return self.out(o.transpose(1, 2).reshape(b, n, d))


class Transformer(nn.Module):
    """SD 1.5's Transformer2DModel: group norm, 1x1 conv in, one block (self-attention,
    cross-attention, GEGLU feed-forward, each pre-norm and residual), 1x1 conv out, residual."""

    def __init__(self, c, context, heads=8):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, 1e-6)
        self.proj_in, self.proj_out = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)
        self.n1, self.n2, self.n3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn1 = CrossAttention(c, c, heads)
        self.attn2 = CrossAttention(c, context, heads)
        self.geglu = nn.Linear(c, 8 * c)
        self.ff_out = nn.Linear(4 * c, c)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).view(b, c, h * w).transpose(1, 2)
        n1 = self.n1(t)
        t = t + self.attn1(n1, n1)
        t = t + self.attn2(self.n2(t), ctx)
        a, gate = self.geglu(self.n3(t)).chunk(2, dim=-1)
        t = t + self.ff_out(a * F.gelu(gate))
        return x + self.proj_out(t.transpose(1, 2).reshape(b, c, h, w))


class UNetBlock(nn.Module):
    """One down or up block of the UNet: resnets, each followed by a transformer in the
    cross-attention blocks, then a strided conv (down) or an upsample (up). Down blocks push
    their outputs for the skip connections, up blocks concatenate them in reverse order."""

    def __init__(self, widths, c, temb, context, cross, resize):
        super().__init__()
        self.res = nn.ModuleList([Resnet(w, c, 1e-5, temb) for w in widths])
        self.attn = nn.ModuleList([Transformer(c, context) for _ in widths]) if cross else None
        self.resize = resize

    def forward(self, x, temb, ctx, skips, up):
        for j, r in enumerate(self.res):
            x = r(torch.cat([x, skips.pop()], dim=1) if up else x, temb)
            if self.attn is not None:
                x = self.attn[j](x, ctx)
            if not up:
                skips.append(x)
        if self.resize is not None:
            x = self.resize(x)
            if not up:
                skips.append(x)
        return x


class UNet(nn.Module):
    """SD 1.5's UNet2DConditionModel (one denoising step)."""

    def __init__(self, channels=(320, 640, 1280, 1280), cross=(True, True, True, False),
                 layers=2, context=768):
        super().__init__()
        c0, temb = channels[0], 4 * channels[0]
        self.c0 = c0
        self.time1, self.time2 = nn.Linear(c0, temb), nn.Linear(temb, temb)
        self.conv_in = conv3(4, c0)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        # The widths of the skip connections, in the order the down blocks push them.
        skips, prev, last = [c0], c0, len(channels) - 1
        for i, (c, x) in enumerate(zip(channels, cross)):
            down = conv3(c, c, stride=2) if i < last else None
            self.down.append(UNetBlock([prev] + [c] * (layers - 1), c, temb, context, x, down))
            skips += [c] * (layers + (i < last))
            prev = c
        top = channels[-1]
        self.mid = nn.ModuleList([Resnet(top, top, 1e-5, temb), Transformer(top, context),
                                  Resnet(top, top, 1e-5, temb)])
        for i, (c, x) in enumerate(zip(reversed(channels), reversed(cross))):
            widths = [(prev if j == 0 else c) + skips.pop() for j in range(layers + 1)]
            up = Upsample(c) if i < last else None
            self.up.append(UNetBlock(widths, c, temb, context, x, up))
            prev = c
        self.norm_out = nn.GroupNorm(32, c0, 1e-5)
        self.conv_out = conv3(c0, 4)

    def forward(self, x, t, ctx):
        half = self.c0 // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device) / half)
        arg = t * freqs[None]
        emb = torch.cat([arg.cos(), arg.sin()], dim=-1).to(x.dtype).expand(x.shape[0], -1)
        temb = self.time2(F.silu(self.time1(emb)))
        x = self.conv_in(x)
        skips = [x]
        for block in self.down:
            x = block(x, temb, ctx, skips, up=False)
        x = self.mid[2](self.mid[1](self.mid[0](x, temb), ctx), temb)
        for block in self.up:
            x = block(x, temb, ctx, skips, up=True)
        return self.conv_out(F.silu(self.norm_out(x)))


class Bottleneck(nn.Module):
    def __init__(self, c_in, c, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv3, self.bn3 = nn.Conv2d(c, 4 * c, 1, bias=False), nn.BatchNorm2d(4 * c)
        self.down = nn.Identity()
        if stride != 1 or c_in != 4 * c:
            self.down = nn.Sequential(nn.Conv2d(c_in, 4 * c, 1, stride, bias=False),
                                      nn.BatchNorm2d(4 * c))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.down(x) + self.bn3(self.conv3(y)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        layers, c_in = [], 64
        for c, n, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(n):
                layers.append(Bottleneck(c_in, c, stride if i == 0 else 1))
                c_in = 4 * c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(self.layers(x).mean((2, 3)))


class WhisperBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.v, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        h = self.ln1(x)

        def split(t):
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)))
        x = x + self.out(o.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class WhisperEncoder(nn.Module):
    def __init__(self, mels=80, d=384, heads=6, layers=4, ctx=1500):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        inv = torch.exp(-math.log(10000.0) / (d // 2 - 1) * torch.arange(d // 2))
        t = torch.arange(ctx)[:, None] * inv[None]
        self.register_buffer("pos", torch.cat([t.sin(), t.cos()], dim=1))
        self.blocks = nn.Sequential(*[WhisperBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)

    def forward(self, mel):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        return self.ln(self.blocks(x + self.pos[: x.shape[1]]))


def model_rows():
    """(op, shape, batch, dtypes, make model, make inputs) of every row."""
    cuda = dict(device="cuda")
    return [
        ("sd15_vae_decode", "1x4x64x64", 1, (torch.float32, torch.float16), VaeDecoder,
         lambda dt: (torch.randn(1, 4, 64, 64, **cuda).to(dt),)),
        ("sd15_unet_step", "2x4x64x64c77x768", 2, (torch.float32, torch.float16), UNet,
         lambda dt: (torch.randn(2, 4, 64, 64, **cuda).to(dt), 981.0,
                     torch.randn(2, 77, 768, **cuda).to(dt))),
        ("resnet50_b1", "1x3x224x224", 1, (torch.float32, torch.float16), ResNet50,
         lambda dt: (torch.randn(1, 3, 224, 224, **cuda).to(dt),)),
        ("resnet50_b32", "32x3x224x224", 32, (torch.float32, torch.float16), ResNet50,
         lambda dt: (torch.randn(32, 3, 224, 224, **cuda).to(dt),)),
        ("whisper_tiny_encoder", "1x80x3000", 1, (torch.float32, torch.float16), WhisperEncoder,
         lambda dt: (torch.randn(1, 80, 3000, **cuda).to(dt),)),
    ]


# Parameters of each model as candle-transformers builds it (counted over the names its
# VarBuilder asks for; ResNet-50 without batch norm's running statistics, which are buffers in
# torch): a model here with another count is not the same model, and its rows are left out.
PARAMS = {
    "sd15_vae_decode": VAE_PARAMS,
    "sd15_unet_step": UNET_PARAMS,
    "resnet50_b1": RESNET50_PARAMS,
    "resnet50_b32": RESNET50_PARAMS,
    "whisper_tiny_encoder": WHISPER_PARAMS,
}


def conv_models(b):
    """Prints the rows `b.wanted` selects (b: torch_bench.Bench), f32 then f16, each with
    cudnn.benchmark off and on; restores the cuDNN and TF32 settings afterwards."""
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for dtype in (torch.float32, torch.float16):
            for op, shape, batch, dtypes, make, inputs in model_rows():
                if dtype not in dtypes or not b.wanted(GROUP, op):
                    continue
                try:
                    model_row(b, op, shape, batch, dtype, make, inputs)
                except Exception:  # one broken row leaves the others (and the bench) running
                    print(f"conv_models: {op} {NAMES[dtype]} failed", file=sys.stderr)
                    traceback.print_exc()
                torch.cuda.empty_cache()
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = saved


def model_row(b, op, shape, batch, dtype, make, inputs):
    """The rows of one model in one dtype: cudnn.benchmark off, then on."""
    with torch.device("cuda"):
        model = make().to(dtype).eval()
    params = sum(p.numel() for p in model.parameters())
    if params != PARAMS[op]:
        raise ValueError(f"{op}: {params} parameters, candle-transformers' has {PARAMS[op]}")
    args = inputs(dtype)
    for bench_on in (False, True):
        torch.backends.cudnn.benchmark = bench_on
        with torch.inference_mode():
            s = time_model(lambda: model(*args))
        name = op + ("_cudnn_benchmark" if bench_on else "")
        b.print(GROUP, name, shape, NAMES[dtype], s, batch, "sequences")
