"""ptxas (sm_90a, on the CPU) instruction counts of a loop over (BS, BD) tiles: the grid rotation
(grid_rotation.py) against the package's butterflies (IN_RUNS, the INT8 codes launch's), per value
per thread. Session p; result in notes/QUANTIZER.md."""
import collections, re, sys
sys.path.insert(0, __import__("os").path.dirname(__file__))
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from zyfa.asm.ptx.assemble import sass
import grid_rotation as gr
from zyfa.triton_kernels.quantize import butterflies

@triton.jit
def _g_loop(x_ptr, out_ptr, signs_ptr, h_ptr, hscale, S, D, NT, BS: tl.constexpr, BD: tl.constexpr, HB: tl.constexpr):
    d = tl.arange(0, BD)
    hb = tl.arange(0, HB)
    hmat = tl.load(h_ptr + hb[:, None] * HB + hb[None, :])
    sg = tl.load(signs_ptr + d, mask=d < D, other=0.0)[None, :]
    for t in range(NT):
        s = (tl.program_id(0) * NT + t) * BS + tl.arange(0, BS)
        m = (s[:, None] < S) & (d[None, :] < D)
        y = tl.load(x_ptr + s[:, None] * D + d[None, :], mask=m, other=0.0) * sg
        tl.store(out_ptr + s[:, None] * D + d[None, :], gr.grid_rotation(y, hmat, BS, BD, HB) * hscale, mask=m)

@triton.jit
def _b_loop(x_ptr, out_ptr, signs_ptr, h_ptr, hscale, S, D, NT, BS: tl.constexpr, BD: tl.constexpr, HB: tl.constexpr, NST: tl.constexpr):
    d = tl.arange(0, BD)
    sg = tl.load(signs_ptr + d, mask=d < D, other=0.0)[None, :]
    for t in range(NT):
        s = (tl.program_id(0) * NT + t) * BS + tl.arange(0, BS)
        m = (s[:, None] < S) & (d[None, :] < D)
        y = tl.load(x_ptr + s[:, None] * D + d[None, :], mask=m, other=0.0) * sg
        tl.store(out_ptr + s[:, None] * D + d[None, :], butterflies(y, HB, BS, BD, NST, True) * hscale, mask=m)

def loop_count(fn, consts):
    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "signs_ptr": "*fp32", "h_ptr": "*i8", "hscale": "fp32", "S": "i32", "D": "i32", "NT": "i32"}
    sig.update({k: "constexpr" for k in consts})
    k = triton.compile(ASTSource(fn, sig, consts), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    code = sass(k.asm["cubin"])
    lines = [l for l in code.splitlines() if re.search(r"\*/\s+(?:@!?P\d )?[A-Z]", l) and re.search(r"/\*[0-9a-f]{4,}\*/", l)]
    addr = lambda l: int(re.search(r"/\*([0-9a-f]{4,})\*/", l).group(1), 16)
    back = [(int(m.group(1), 16), addr(l)) for l in lines if (m := re.search(r"BRA.*?0x([0-9a-f]+)", l)) and int(m.group(1), 16) < addr(l)]
    lo, hi = max(back, key=lambda b: b[1] - b[0])
    body = [re.search(r"\*/\s+(?:@!?P\d )?([A-Z][A-Z0-9]*)", l).group(1) for l in lines if lo <= addr(l) <= hi]
    return len(body), collections.Counter(body)

for D, BD, HB, BS in ((192, 256, 64, 16), (128, 128, 128, 16), (64, 64, 64, 32), (128, 128, 128, 32)):
    n = BS * BD / 128
    tg, cg = loop_count(_g_loop, dict(BS=BS, BD=BD, HB=HB))
    tb, cb = loop_count(_b_loop, dict(BS=BS, BD=BD, HB=HB, NST=HB.bit_length() - 1))
    print(f"D {D} tile {BS}x{BD}: loop a tile: grid {tg} ({tg/n:.1f} a value a thread; IMMA {cg['IMMA']} LDS {cg['LDS']} STS {cg['STS']} LDSM {cg['LDSM']}), "
          f"butterflies {tb} ({tb/n:.1f}; SHFL {cb['SHFL']})")
    if D == 128 and BS == 16: print("   grid:", cg.most_common(14))
