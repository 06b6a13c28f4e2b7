"""Block-loop counts: static; dynamic = without the negative-factor branch (int8); steady = also
without the reference-move branch (both vote-guarded forward branches)."""
import sys, os, re, collections
sys.path.insert(0, "/tmp/i8fold")
from zyfa.verify.ptx import sass as S
def analyse(path, gmmas=4):
    loop = S.block_loop(S.instructions(open(path).read()), gmmas)
    ranges = {}
    for k, i in enumerate(loop):
        mm = re.fullmatch(r"@!P\d BRA (0x[0-9a-f]+)", i.text)
        if mm and int(mm.group(1), 16) > i.addr:
            j = i
            lo, hi = j.addr + 16, int(mm.group(1), 16) - 16
            body = [x for x in loop if lo <= x.addr <= hi]
            if len(body) >= 60:
                kind = "refmoves" if any("MUFU" in x.mnemonic for x in body) else "negative"
                ranges[kind] = (lo, hi, len(body))
    def count(skip):
        l = [i for i in loop if not any(lo <= i.addr <= hi for (lo, hi, _) in (ranges[s] for s in skip if s in ranges))]
        return l
    out = {}
    for name, skip in (("static", ()), ("dynamic", ("negative",)), ("steady", ("negative", "refmoves"))):
        l = count(skip)
        out[name] = (len(l), S.static_cycles(l), collections.Counter(i.mnemonic.split(".")[0] for i in l))
    return loop, ranges, out
if __name__ == "__main__":
    base = None
    for path in sys.argv[1:]:
        d = int(re.search(r"_d(\d+)", path).group(1)); loop, ranges, out = analyse(path, d // 32)
        print(os.path.basename(path), {k: (hex(a), hex(b), n) for k, (a, b, n) in ranges.items()})
        for name, (n, cyc, mix) in out.items():
            print(f"   {name:8s} {n:4d} instrs {cyc:5d} stall-cycles")
        print("   steady mix:", ", ".join(f"{m} {n}" for m, n in out["steady"][2].most_common()))
