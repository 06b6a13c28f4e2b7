import re, collections, sys
from zyfa.verify.ptx import sass as S
sys.path.insert(0,'/work/shared/tools')
import sass_mix
def loops(name):
    ins = S.instructions(open(f"out/{name}.sass").read())
    res=[]
    for i in ins:
        m = re.fullmatch(r"(?:@!?U?P\d )?BRA (0x[0-9a-f]+)", i.text)
        if m and int(m.group(1),16) < i.addr:
            lo=int(m.group(1),16); body=[x for x in ins if lo<=x.addr<=i.addr]
            if sum("GMMA" in x.mnemonic for x in body)>=16: res.append(body)
    # innermost: loops not containing another candidate
    inner=[b for b in res if not any(o is not b and b[0].addr<=o[0].addr and o[-1].addr<=b[-1].addr for o in res)]
    return sorted(inner, key=lambda b:b[0].addr)
def hot(body):
    lo,hi=body[0].addr, body[-1].addr
    skips=[]
    for i in body:
        m = re.fullmatch(r"@!?U?P\d BRA (0x[0-9a-f]+)", i.text)
        if m:
            t=int(m.group(1),16)
            if i.addr < t <= hi: skips.append((i.addr+16, t-16))
    return [i for i in body if not any(a<=i.addr<=b for a,b in skips)], skips
def klass(i):
    op = re.sub(r"^@!?U?P[T\d]\s+","",i.text).split(" ")[0]
    return sass_mix.klass(op)
if __name__=="__main__":
    names=sys.argv[1:]
    tabs={}
    for n in names:
        for li,b in enumerate(loops(n)[:2]):
            h,sk=hot(b)
            key=f"{n}[{'unmasked' if li==0 else 'masked'}]"
            tabs[key]=(collections.Counter(klass(i) for i in h), len(b), S.static_cycles(b), len(h), S.static_cycles(h), [(hex(a),hex(c), sum(1 for i in b if a<=i.addr<=c)) for a,c in sk])
    for k,(c,nb,cb,nh,ch,sk) in tabs.items():
        print(f"{k}: loop {nb} ins / {cb} cyc; hot path {nh} ins / {ch} cyc; skipped {sk}")
    classes=sorted(set().union(*[t[0] for t in tabs.values()]))
    print("class".ljust(18)+"".join(k[:22].rjust(24) for k in tabs))
    for cl in classes:
        print(cl.ljust(18)+"".join(str(t[0][cl]).rjust(24) for t in tabs.values()))
