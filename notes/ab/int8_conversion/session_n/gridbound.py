import torch, math
from zyfa.spec.e4m3 import fma32
from zyfa.spec.constants import MAGIC
torch.manual_seed(0)
def trunc(c): return (c.view(torch.int32) & ~3).view(torch.float32)
def ru_fma(a,b,c):
    # float32 round-up of a*b+c via float64 exact (products of f32 are exact in f64 only approx; use nextafter fix)
    x = a.double()*b.double()+c.double()
    f = x.float()
    up = torch.where(f.double() < x, torch.nextafter(f, torch.tensor(float('inf'))), f)
    return up
for d in (128, 256):
    smax = 127*127*d
    bound = 2**24/(MAGIC+smax)
    print(f"d{d}: Smax {smax}, RN-safe bound c' < 2^24/(M+Smax) = {bound:.4f}")
    for c0 in (1e-4, 0.01, 0.5, 1.0, 1.1, 1.2, 2.0, 8.0):
        c = trunc(torch.tensor([c0]*4096, dtype=torch.float32).mul(1+torch.rand(4096)*0.25).float())[:, None]
        S = torch.randint(-smax, smax+1, (4096, 128)).float(); S[:, 0] = smax*torch.rand(4096).float().round()
        t = (S*c).float(); m = t.amax(1, keepdim=True)
        Mc = (MAGIC*c).float()
        for name, X in (("RN", fma32(torch.full_like(m, MAGIC), c, m)), ("RU", ru_fma(torch.full_like(m, MAGIC), c, m))):
            r = (X - Mc).float()
            exact = torch.equal(r.double(), X.double()-Mc.double())
            y = fma32(S, c, -r); y2 = fma32(S+MAGIC, c, -X)
            print(f"   c~{c0:<6} {name}: y forms equal {torch.equal(y,y2)}, r exact {exact}, max y {y.max().item():+.3f}, "
                  f"max P {2**(8+y.max().item()):.0f}, min top-P {2**(8+y.amax(1).min().item()):.0f}")
print("debug")
c = trunc(torch.tensor([1.0]*8).mul(1+torch.rand(8)*0.25).float())[:, None]
smax=127*127*128
S = torch.randint(-smax, smax+1, (8, 128)).float(); S[:,0]=smax
t=(S*c).float(); m=t.amax(1,keepdim=True); Mc=(MAGIC*c).float()
X=ru_fma(torch.full_like(m, MAGIC), c, m); r=(X-Mc).float()
y=fma32(S,c,-r)
for i in range(8): print(c[i].item(), m[i].item(), X[i].item(), r[i].item(), (r-m)[i].item(), y[i].max().item(), (MAGIC*c[i].double()+m[i].double()).item())
