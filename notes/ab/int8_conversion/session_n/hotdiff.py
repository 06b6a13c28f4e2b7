import sys, re, collections
from hot import loops, hot
def h(name):
    b=loops(name)[0]; hp,_=hot(b)
    return collections.Counter(re.sub(r"^@!?U?P[T\d]\s+","",i.text).split(" ")[0] for i in hp)
names=sys.argv[1:]
hs=[h(n) for n in names]
keys=sorted(set().union(*hs), key=lambda k:-max(x[k] for x in hs))
print("mnemonic".ljust(40)+"".join(n.rjust(14) for n in names))
for k in keys:
    vals=[x[k] for x in hs]
    if len(set(vals))>1: print(k.ljust(40)+"".join(str(v).rjust(14) for v in vals))
print("total".ljust(40)+"".join(str(sum(x.values())).rjust(14) for x in hs))
