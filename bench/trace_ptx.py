"""Where a generated 16-bit kernel's time goes, tile by tile and block by block. Each consumer
warp's lane 0 stamps the SM's clock at the consumers' PTX labels and at the entry and exit of
each of their mbarrier waits (WAIT_* loops), into a buffer of its own (the producer is left
alone: its few registers would spill); the stamps become the time a tile
waits for Q, each block's time by its index in the tile, the K and V waits, the tile's tail
(last P V, epilogue) and how far apart the two consumers run. Nsight Compute's samples say
where warps stall over the whole launch; these say when, within a tile.

The probes take registers and issue slots, so the run also times the kernel without them and
prints the slowdown: read the shares, not the absolute cycles, when it is large.

    python bench/trace_ptx.py --case "d256/256 1K"                 # the public route's kernel
    python bench/trace_ptx.py --case "d256/256 16K" --route dense --out trace.json
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zyfa.asm.ptx import attention as attn  # noqa: E402
from zyfa.asm.ptx.assemble import assemble  # noqa: E402

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):$")
_SPIN = re.compile(r"^@!%\w+ bra (WAIT_\w+);$")
_REGS = """\t.reg .u64 %tr_ptr, %tr_end, %tr_off;
\t.reg .u32 %tr_clk, %tr_id, %tr_a, %tr_b, %tr_off_lo;
\t.reg .pred %tr_p, %tr_lane0;"""


def _probe(event: int) -> list[str]:
    return ["\tmov.u32 %tr_clk, %clock;", f"\tmov.u32 %tr_id, {event};",
            "\tsetp.lt.and.u64 %tr_p, %tr_ptr, %tr_end, %tr_lane0;",
            "\t@%tr_p st.global.v2.u32 [%tr_ptr], {%tr_clk, %tr_id};",
            "\t@%tr_p add.u64 %tr_ptr, %tr_ptr, 8;"]


def instrument(ptx: str, base: int, slots: int) -> tuple[str, list[str]]:
    """``ptx`` with the probes in the consumers' code (before the PRODUCER label): warp w of CTA
    c writes (clock, event) pairs from base + (c * warps + w) * slots * 8, at most ``slots``.
    Returns it and the events' names: a label's name (stamped as it is entered), "enter
    WAIT_X" / "exit WAIT_X" around a wait. The producer runs under setmaxnreg's lower count,
    where the probes' registers spilled (12 bytes at d256 with K loaded ahead of V)."""
    lines = ptx.splitlines()
    last_reg = max(i for i, line in enumerate(lines) if line.startswith("\t.reg "))
    init = ["\tmov.u32 %tr_a, %tid.x;", "\tand.b32 %tr_b, %tr_a, 31;", "\tsetp.eq.u32 %tr_lane0, %tr_b, 0;",
            "\tshr.u32 %tr_a, %tr_a, 5;", "\tmov.u32 %tr_b, %ntid.x;", "\tshr.u32 %tr_b, %tr_b, 5;",
            "\tmov.u32 %tr_clk, %ctaid.z;", "\tmov.u32 %tr_id, %nctaid.y;", "\tmov.u32 %tr_off_lo, %ctaid.y;",
            "\tmad.lo.u32 %tr_clk, %tr_clk, %tr_id, %tr_off_lo;", "\tmov.u32 %tr_id, %nctaid.x;",
            "\tmov.u32 %tr_off_lo, %ctaid.x;", "\tmad.lo.u32 %tr_clk, %tr_clk, %tr_id, %tr_off_lo;",   # the CTA
            "\tmad.lo.u32 %tr_a, %tr_clk, %tr_b, %tr_a;",
            f"\tmul.wide.u32 %tr_off, %tr_a, {slots * 8};", f"\tmov.u64 %tr_ptr, {base};",
            "\tadd.u64 %tr_ptr, %tr_ptr, %tr_off;", f"\tadd.u64 %tr_end, %tr_ptr, {slots * 8};"]
    names: list[str] = []

    def event(name: str) -> list[str]:
        names.append(name)
        return _probe(len(names) - 1)

    # every warp's first two stamps: its SM (in the clock's place), then its start
    smid = event("smid")
    smid[0] = "\tmov.u32 %tr_clk, %smid;"
    out = lines[:last_reg + 1] + [_REGS] + init + smid + event("start")
    producer = False
    for line in lines[last_reg + 1:]:
        text = line.strip()
        label = _LABEL.match(text)
        producer = producer or text == "PRODUCER:"
        if producer:
            out.append(line)
        elif label and label.group(1).startswith("WAIT_"):       # a spin loop's head: stamp it once, before
            out += event(f"enter {label.group(1)}") + [line]
        elif label:
            out += [line] + event(label.group(1))
        else:
            out.append(line)
            spin = _SPIN.match(text)
            if spin:
                out += event(f"exit {spin.group(1)}")
    return "\n".join(out) + "\n", names


def decode(words, names: list[str]) -> tuple[dict[int, list[tuple[int, str]]], dict[int, tuple[int, int, int]]]:
    """Each warp's stamps (warp index -> [(cycles since its start, event)]), and where and when
    it ran (warp index -> (SM, its start's and last stamp's raw 32-bit clock))."""
    import numpy as np
    w = words.cpu().numpy().astype(np.int64)
    warps, spans = {}, {}
    for g in range(w.shape[0]):
        n = int((w[g, :, 1] >= 0).sum())
        if n < 2:
            continue
        spans[g] = (int(w[g, 0, 0]), int(w[g, 1, 0]), int(w[g, n - 1, 0]))
        clk = (w[g, 1:n, 0] - w[g, 1, 0]) & 0xFFFFFFFF             # the 32-bit clock, unwrapped
        warps[g] = [(int(c), names[int(e)]) for c, e in zip(clk, w[g, 1:n, 1])]
    return warps, spans


def sm_gaps(spans: dict, warps_per_cta: int) -> dict | None:
    """Between one CTA's end and the next one's start on the same SM (a dense launch, a CTA a
    tile): the cycles no consumer runs, from each CTA's first consumer warp (start: the
    kernel's first instruction; end: its last stamp, after the epilogue's stores are issued)."""
    by_sm = collections.defaultdict(list)
    for g, (sm, start, end) in spans.items():
        if g % warps_per_cta == 4:
            by_sm[sm].append((start, end))
    gaps, busy, span, ctas = [], 0, 0, 0
    for runs in by_sm.values():
        ref = runs[0][0]

        def rel(c):                                        # signed cycles from ref, mod 2^32
            d = (c - ref) & 0xFFFFFFFF
            return d - (1 << 32) if d >= 1 << 31 else d
        runs = sorted((rel(a), rel(b)) for a, b in runs)
        gaps += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
        busy += sum(b - a for a, b in runs)
        span += runs[-1][1] - runs[0][0]
        ctas += len(runs)
    if not gaps:
        return None
    gaps.sort()
    return dict(sms=len(by_sm), ctas_per_sm=ctas / len(by_sm), gap_mean=sum(gaps) / len(gaps),
                gap_median=gaps[len(gaps) // 2], gap_share=sum(gaps) / span, busy_share=busy / span)


def tiles_of(stamps: list[tuple[int, str]]) -> list[dict]:
    """A consumer warp's stamps cut into tiles at each Q wait: the wait, its blocks (block 0
    from Q's arrival, then one a BLOCK_BODY* stamp) with the K and V waits in each, the last
    P V's V wait, and the tail from LAST_PV to the next Q wait (last P V, epilogue, next head;
    a packed CTA's end is handed over as a Q wait too; None where no Q wait follows, as after
    a dense CTA's one tile)."""
    tiles, cur, open_waits = [], None, {}
    for clk, name in stamps:
        if name.startswith("enter WAIT_Q"):
            if cur is not None and cur["last_pv"] is not None:
                cur["tail"] = clk - cur["last_pv"]
                tiles.append(cur)
            cur = dict(q_enter=clk, q_wait=None, blocks=[], last_pv=None, last_v_wait=0, tail=None)
        if cur is None:
            continue
        if name.startswith("enter "):
            open_waits[name[6:]] = clk
        elif name.startswith("exit "):
            wait = name[5:]
            spent = clk - open_waits.pop(wait, clk)
            if wait.startswith("WAIT_Q"):
                cur["q_wait"] = spent
                cur["blocks"].append(dict(start=clk, below=False, k_wait=0, v_wait=0))
            elif cur["last_pv"] is not None:
                cur["last_v_wait"] += spent
            elif cur["blocks"]:
                cur["blocks"][-1]["k_wait" if wait.startswith("WAIT_KV") else "v_wait"] += spent
        elif name.startswith("BLOCK_BODY"):
            cur["blocks"].append(dict(start=clk, below=name.endswith("_BELOW"), k_wait=0, v_wait=0))
        elif name == "LAST_PV":
            cur["last_pv"] = clk
    if cur is not None and cur["last_pv"] is not None:     # no Q wait after it (a dense CTA's one tile):
        tiles.append(cur)                                   # its tail unknown
    return tiles


def summarize(warps: dict, warps_per_cta: int, consumers: int) -> dict:
    """Means over the consumer warps' tiles (each consumer's first warp): per tile, and per
    block by its index in the tile (8 and later together); with two consumers, how far apart
    they start their blocks, and the second's lag by block index (tiles paired in order)."""
    firsts = [4 * (k + 1) for k in range(consumers)]        # warpgroup 0 is the producer
    per_index, tiles_all, offsets = collections.defaultdict(lambda: collections.defaultdict(list)), [], []
    for g, stamps in warps.items():
        if g % warps_per_cta not in firsts:
            continue
        for t in tiles_of(stamps):
            blocks = t["blocks"]
            ends = [b["start"] for b in blocks[1:]] + [t["last_pv"]]
            for i, (b, end) in enumerate(zip(blocks, ends)):
                slot = per_index[min(i, 8)]
                slot["cycles"].append(end - b["start"])
                slot["k_wait"].append(b["k_wait"])
                slot["v_wait"].append(b["v_wait"])
            body = t["last_pv"] - blocks[0]["start"] if blocks else None
            tiles_all.append(dict(blocks=len(blocks), q_wait=t["q_wait"], tail=t["tail"],
                                  last_v_wait=t["last_v_wait"], body=body))
    lag = collections.defaultdict(list)                    # the second consumer's lag by block index
    for cta in {g // warps_per_cta for g in warps}:         # the consumers' lag, block by block
        seqs = [[c for c, n in warps.get(cta * warps_per_cta + f, []) if n.startswith("BLOCK_BODY")] for f in firsts]
        if len(seqs) == 2 and seqs[0] and seqs[1]:
            offsets += [abs(a - b) for a, b in zip(seqs[0], seqs[1])]
            first, second = (tiles_of(warps[cta * warps_per_cta + f]) for f in firsts)
            for ta, tb in zip(first, second):
                for i, (ba, bb) in enumerate(zip(ta["blocks"], tb["blocks"])):
                    lag[min(i, 8)].append(bb["start"] - ba["start"])

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None
    keys = ("q_wait", "body", "tail", "last_v_wait", "blocks")
    return dict(tiles=len(tiles_all), per_tile={k: mean([t[k] for t in tiles_all]) for k in keys},
                by_block_index={("8+" if i == 8 else str(i)): {k: mean(v) for k, v in slot.items()}
                                | dict(n=len(slot["cycles"])) for i, slot in sorted(per_index.items())},
                consumer_offset=mean(offsets),
                lag_by_block_index={("8+" if i == 8 else str(i)): mean(v) for i, v in sorted(lag.items())})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="d256/256 1K", help="a models or sweep case of zyfa bench (BF16)")
    ap.add_argument("--route", choices=("public", "packed", "dense"), default="public")
    ap.add_argument("--slots", type=int, default=2048, help="stamps a warp keeps")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import torch

    from zyfa.asm.ptx import kernels as K
    from zyfa.asm.ptx.loader import Kernel
    from zyfa.bench.cases import model_cases, sweep_cases
    from zyfa.bench.measure import median_ms
    from zyfa.bench.run import case_inputs
    case = next(c for c in model_cases() + sweep_cases() if c.name == a.case)
    inp = case_inputs(case, "cuda")
    q, k, v = inp.q, inp.k, inp.v
    B, S, Hq, D = q.shape
    packed = a.route == "packed" or (a.route == "public" and S <= K.PACKED_ROUTE_KEYS.get(D, 0))
    layout = attn.layout_for(D, "bf16", v.shape[-1], packed)
    warps_per_cta = 4 * (layout.consumers + 1)
    # a packed launch: a CTA an SM; a dense one a CTA per tile of its consumers' rows (kernels._grid)
    rows = layout.consumers * attn.BLOCK_M
    ctas = torch.cuda.get_device_properties(0).multi_processor_count if packed else B * Hq * -(-S // rows)
    buf = torch.full((ctas * warps_per_cta, a.slots, 2), -1, dtype=torch.int32, device="cuda")
    names: list[str] = []

    @functools.cache
    def traced(dtype, causal, dqk, dv, arch, device, packed_):
        name, ptx = attn.attention_kernel_16(dtype, causal, dqk, dv, arch, packed_)
        ptx, found = instrument(ptx, buf.data_ptr(), a.slots)
        names[:] = found
        asm = assemble(ptx, arch)
        print(f"instrumented {name}: {len(found)} probes, {asm.registers} registers, {asm.spill_bytes} spill bytes")
        shared = attn.layout_for(dqk, dtype, dv, packed_).shared_bytes
        return Kernel(asm.cubin, name, torch.device("cuda", device), shared)

    def call():
        if packed:
            out, _ = K.attention_16(*(K._flat(x) for x in (q, k, v)), inp.scale, case.causal,
                                    K._uniform_batch(B, S, k.shape[1], q.device))
            return out
        saved, K.PACKED_ROUTE_KEYS = K.PACKED_ROUTE_KEYS, {}
        try:
            return K.attention_16(q, k, v, inp.scale, case.causal)[0]
        finally:
            K.PACKED_ROUTE_KEYS = saved

    plain = K._attention_16
    ms_plain = median_ms(call)
    K._attention_16 = traced
    ms_traced = median_ms(call)
    buf.fill_(-1)
    call()
    torch.cuda.synchronize()
    K._attention_16 = plain
    warps, spans = decode(buf, names)
    s = summarize(warps, warps_per_cta, layout.consumers)
    s["sm_gaps"] = None if packed else sm_gaps(spans, warps_per_cta)
    s.update(case=a.case, route="packed" if packed else "dense", ms=ms_plain, ms_traced=ms_traced,
             gpu=torch.cuda.get_device_name(), torch=torch.__version__)
    print(f"{a.case} {s['route']}: {ms_plain:.3f} ms, traced {ms_traced:.3f} ms "
          f"({ms_traced / ms_plain - 1:+.1%}); {s['tiles']} tiles of consumers' first warps")
    print("per tile (cycles): " + ", ".join(f"{k} {v:.0f}" for k, v in s["per_tile"].items() if v is not None))
    print("block index in the tile | cycles | K wait | V wait | blocks")
    for i, b in s["by_block_index"].items():
        print(f"{i:>5} | {b['cycles']:.0f} | {b['k_wait']:.0f} | {b['v_wait']:.0f} | {b['n']}")
    if s["consumer_offset"] is not None:
        print(f"the two consumers' block starts apart: {s['consumer_offset']:.0f} cycles on average; the second's "
              "lag by block index: " + ", ".join(f"{i} {v:.0f}" for i, v in s["lag_by_block_index"].items()))
    if s["sm_gaps"]:
        g = s["sm_gaps"]
        print(f"between CTAs on an SM ({g['sms']} SMs, {g['ctas_per_sm']:.1f} CTAs each): {g['gap_mean']:.0f} "
              f"cycles on average (median {g['gap_median']}), {g['gap_share']:.1%} of the SMs' spans")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
