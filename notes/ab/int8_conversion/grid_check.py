"""(a'): c' = c & ~3 (bits), m on the grid: X = RN(M c' + m), r = X - M c'. Check y = fma(S, c', -r) (spec form)
equals fma(M + S, c', -X) (kernel form) bit for bit, and r - m, over c from 1e-9 to 1e3 and head dims to 256."""
import sys, torch
sys.path.insert(0, "/tmp/i8fold")
from zyfa.spec.e4m3 import fma32
from zyfa.spec.constants import MAGIC
torch.manual_seed(1)
def trunc(c):
    return (c.view(torch.int32) & ~3).view(torch.float32)
worst, neq, n = 0.0, 0, 0
for d in (64, 128, 256):
    for e in range(-30, 10):
        c = trunc((torch.rand(64, 1) + 0.5).float() * 2.0 ** e)
        smax = 127 * 127 * d
        S = torch.randint(-smax, smax + 1, (64, 128)).float()
        S[:8, 0] = smax; S[8:16, 0] = -smax          # extremes
        S[8:16, 1:] = -smax
        m = (S * c).amax(1, keepdim=True)            # t = S c' (float32), row max
        Mc = (torch.tensor(MAGIC) * c).float()
        assert torch.equal(Mc.double(), MAGIC * c.double())   # exact
        X = fma32(torch.full_like(m, MAGIC), c, m)
        r = X - Mc                                   # float32 subtraction
        assert torch.equal(r.double(), X.double() - Mc.double())   # exact (Sterbenz)
        y1 = fma32(S, c, -r)
        y2 = fma32(S + MAGIC, c, -X)
        neq += int((y1 != y2).sum()); n += y1.numel()
        worst = max(worst, ((r - m).abs() / c).max().item())
        worst_y = max(globals().get("worst_y", 0.0), (y1 / c).max().item()); globals()["worst_y"] = worst_y
print(f"elements {n}, y forms differing: {neq}; max |r - m| = {worst:.3f} c; max y = {worst_y:.3f} c")
