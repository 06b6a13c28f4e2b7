"""(a)'s exponent argument y_a = fma(M + S, c, -fma(M, c, r)) vs the spec's y = fma(S, c, -r):
|dy|, |dy| / c, P code differences (exact, lean_cubic), against float32's rounding of y."""
import math, sys, torch
sys.path.insert(0, "/tmp/i8fold")
from zyfa.spec.e4m3 import fma32
from zyfa.spec.rules import p_bits
from zyfa.spec.constants import MAGIC, LOG2E, NEG_FLOOR
torch.manual_seed(0)
def run(d, amax, Sq=256, Sk=2048):
    sig = amax / 4.0
    q = torch.randn(Sq, d, dtype=torch.float64) * sig
    k = torch.randn(Sk, d, dtype=torch.float64) * sig
    qa = q.abs().amax(1, keepdim=True); qd = (qa / 127).float()
    qc = torch.round(q / qd.double()).clamp(-127, 127)
    kb = k.view(Sk // 128, 128, d).abs().amax((1, 2)); kd = (kb / 127).float()
    kc = torch.round(k / kd.repeat_interleave(128)[:, None].double()).clamp(-127, 127)
    S = (qc @ kc.T).float()                                        # exact integers
    row = (qd * (1 / math.sqrt(d) * LOG2E)).float()                # row factor
    c = (row * kd.repeat_interleave(128)[None, :]).float()         # (Sq, Sk), per block
    stats = dict(c_min=c.min().item(), c_max=c.max().item())
    dys, flips = [], {"exact": [0, 0], "lean_cubic": [0, 0]}
    ulp_y = 0.0
    for j in range(Sk // 128):
        s, cc = S[:, j*128:(j+1)*128], c[:, j*128:(j+1)*128]
        t = s * cc
        r = torch.clamp(t.amax(1), min=NEG_FLOOR)[:, None]
        y = fma32(s, cc, -r)
        X = fma32(torch.full_like(s, MAGIC), cc, r.expand_as(s))
        ya = fma32(s + MAGIC, cc, -X)
        dys.append(((ya.double() - y.double()) / cc.double(), (ya.double() - y.double())))
        ulp_y = max(ulp_y, (torch.nextafter(y, torch.tensor(float("inf"))) - y).abs().max().item() / 2)
        for rule in flips:
            a, b = p_bits(y, rule), p_bits(ya, rule)
            nz = (a > 0) | (b > 0)
            flips[rule][0] += int(((a != b) & nz).sum()); flips[rule][1] += int(nz.sum())
    rel = torch.cat([a.flatten() for a, _ in dys]); ab = torch.cat([b.flatten() for _, b in dys])
    print(f"d{d:3d} amax {amax:4.0f}: c {stats['c_min']:.2e}..{stats['c_max']:.2e}  max|dy| {ab.abs().max():.2e} "
          f"(= {rel.abs().max():.3f} c, mean {rel.abs().mean():.3f} c)  max rel dP {2**ab.abs().max().item() - 1:.1e}  "
          f"f32 half-ulp(y) max {ulp_y:.1e}  codes differing: exact {flips['exact'][0]/flips['exact'][1]:.2e}, "
          f"lean_cubic {flips['lean_cubic'][0]/flips['lean_cubic'][1]:.2e} (of {flips['exact'][1]} nonzero)")
for d in (64, 128, 256):
    for amax in (1, 4, 20):
        run(d, amax)
