"""Memory instructions of the emulator: global loads and stores (64-bit address, or 32-bit
offset plus SGPR base), raw buffer loads, and LDS (ds_*) reads, writes and lane exchanges,
every LDS access checked for bounds and for races between waves (``emulator.LdsRaces``)."""
from __future__ import annotations

import numpy as np

from .core import U32, U64, WAVE, op


# ---- global memory: "global_load_dword vdst, vaddr(64-bit), off" or "vdst, voffset(32-bit), sbase"
def _global_addr(w, i, addr_tok, base_tok):
    off = U64(int(i.mods.get("offset", "0"), 0) & 0xFFFFFFFFFFFFFFFF)     # signed (13 bits): wraps
    if base_tok == "off":
        return w.vsrc64(addr_tok) + off
    return w.vsrc(addr_tok).astype(U64) + U64(w.sval(base_tok, 64)) + off


@op("global_load_dword", "global_load_dwordx2", "global_load_dwordx4", "global_load_ubyte")
def _global_load(w, i):
    n = {"global_load_dword": 4, "global_load_dwordx2": 8, "global_load_dwordx4": 16, "global_load_ubyte": 1}[i.op]
    addr = _global_addr(w, i, i.args[1], i.args[2])
    act = w.active()
    data = np.zeros((WAVE, max(n, 4)), np.uint8)
    if act.any():
        data[act, :n] = w.mem.read(addr[act], n)
    w.set_block(i.args[0], data.view(U32))


@op("global_store_dword", "global_store_dwordx2", "global_store_dwordx4", "global_store_byte")
def _global_store(w, i):
    n = {"global_store_dword": 4, "global_store_dwordx2": 8, "global_store_dwordx4": 16, "global_store_byte": 1}[i.op]
    addr = _global_addr(w, i, i.args[0], i.args[2])
    data = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)[:, :n]
    act = w.active()
    if act.any():
        w.mem.write(addr[act], data[act])


# ---- LDS ("ds_*"): per-workgroup bytes; address = VGPR + offset
def _lds_index(w, addr, nbytes, read=True):
    """Byte indices of an LDS access (lanes x bytes), checked for bounds (and reads for races)."""
    idx = addr.astype(np.int64)[:, None] + np.arange(nbytes)
    if idx.size and (idx.min() < 0 or idx.max() >= len(w.lds)):
        raise IndexError(f"LDS access out of bounds ({len(w.lds)} bytes)")
    if read and w.races is not None and idx.size:
        w.races.read(w.index, idx.reshape(-1))
    return idx


def _lds_store(w, addr, data):
    """Write (lanes x bytes) at the lanes' addresses, checked for bounds and races."""
    idx = _lds_index(w, addr, data.shape[1], read=False)
    if w.races is not None and idx.size:
        w.races.write(w.index, idx.reshape(-1), data.reshape(-1), w.lds[idx].reshape(-1))
    w.lds[idx] = data


@op("ds_write_b8", "ds_write_b16", "ds_write_b32", "ds_write_b64", "ds_write_b128")
def _ds_write(w, i):
    n = int(i.op.rsplit("_b", 1)[1]) // 8
    addr = w.vsrc(i.args[0]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)[:, :n]
    act = w.active()
    _lds_store(w, addr[act], data[act])


@op("ds_read_b32", "ds_read_b64", "ds_read_b128")
def _ds_read(w, i):
    n = int(i.op.rsplit("_b", 1)[1]) // 8
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.zeros((WAVE, n), np.uint8)
    act = w.active()
    data[act] = w.lds[_lds_index(w, addr[act], n)]
    w.set_block(i.args[0], data.view(U32))


@op("ds_read_u8", "ds_read_u16")
def _ds_read_narrow(w, i):
    n = 1 if i.op == "ds_read_u8" else 2
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.zeros((WAVE, 4), np.uint8)
    act = w.active()
    data[act, :n] = w.lds[_lds_index(w, addr[act], n)]
    w.set_v(i.args[0], data.view(U32).reshape(-1))


@op("ds_read_b64_tr_b8")
def _ds_read_tr_b8(w, i):
    """Transpose read: each lane names 8 bytes; within each 16 lanes, byte b of lane i is byte
    i % 8 of the 8 named by lane 2 b + i // 8 (two interleaved 8 x 8 byte transposes: lanes
    0-7 from the even lanes, 8-15 from the odd). Of four readings of the prose this is the one
    under which Triton's compiled scaled FP8 dots give their exact products (tests/gfx950/test_gfx950.py)."""
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    act = w.active()
    if not act.all():
        raise NotImplementedError(f"transpose reads with lanes off ({i.line})")
    rows = w.lds[_lds_index(w, addr, 8)]                    # (64 lanes, 8 bytes) at each lane's address
    lane, byte = np.meshgrid(np.arange(WAVE), np.arange(8), indexing="ij")
    src_lane, src_byte = 2 * byte + (lane % 16) // 8, lane % 8
    out = rows[16 * (lane // 16) + src_lane, src_byte]
    w.set_block(i.args[0], np.ascontiguousarray(out.astype(np.uint8)).view(U32))


@op("ds_bpermute_b32")
def _ds_bpermute(w, i):
    """Lane l receives data from lane (address + offset) / 4 (mod 64)."""
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = w.vsrc(i.args[2])
    w.set_v(i.args[0], data[(addr >> U32(2)) & U32(63)])



# ---- what Triton's gfx950 attention kernel adds: swizzles, paired LDS accesses, 16-bit stores, buffer loads
@op("ds_swizzle_b32")
def _ds_swizzle(w, i):
    """swizzle(SWAP, n): lane l takes lane l ^ n (n < 32: within each half of the wave)."""
    mode = i.mods.get("offset", "")
    if not mode.startswith("swizzle(SWAP,"):
        raise NotImplementedError(f"ds_swizzle mode in {i.line}")
    n = int(mode[len("swizzle(SWAP,"):-1], 0)
    w.set_v(i.args[0], w.vsrc(i.args[1])[np.arange(WAVE) ^ n])


@op("ds_read2_b64", "ds_read2st64_b64", "ds_read2_b32", "ds_read2st64_b32")
def _ds_read2(w, i):
    n = 8 if "b64" in i.op else 4
    unit = n * (64 if "st64" in i.op else 1)
    addr, act = w.vsrc(i.args[1]), w.active()
    data = np.zeros((WAVE, 2 * n), np.uint8)
    for k, key in enumerate(("offset0", "offset1")):
        at = addr + U32(unit * int(i.mods.get(key, "0"), 0))
        data[act, k * n:(k + 1) * n] = w.lds[_lds_index(w, at[act], n)]
    w.set_block(i.args[0], data.view(U32))


@op("ds_write2_b64", "ds_write2st64_b64", "ds_write2_b32", "ds_write2st64_b32")
def _ds_write2(w, i):
    n = 8 if "b64" in i.op else 4
    unit = n * (64 if "st64" in i.op else 1)
    addr, act = w.vsrc(i.args[0]), w.active()
    for k, (tok, key) in enumerate(zip(i.args[1:3], ("offset0", "offset1"))):
        at = addr + U32(unit * int(i.mods.get(key, "0"), 0))
        data = np.ascontiguousarray(w.block(tok)).view(np.uint8)[:, :n]
        _lds_store(w, at[act], data[act])


@op("global_store_short", "global_store_short_d16_hi")
def _global_store_short(w, i):
    addr = _global_addr(w, i, i.args[0], i.args[2])
    word = w.vsrc(i.args[1]) >> U32(16 if i.op.endswith("hi") else 0)
    act = w.active()
    if act.any():
        w.mem.write(addr[act], np.ascontiguousarray((word & U32(0xFFFF)).astype(np.uint16)).view(np.uint8).reshape(-1, 2)[act])


@op("buffer_load_dword", "buffer_load_dwordx2", "buffer_load_dwordx4")
def _buffer_load(w, i):
    """Raw buffer loads (stride 0, ``offen``): address = base + voffset + offset; each dword
    at or past the resource's num_records reads 0 (how Triton masks)."""
    n = {"buffer_load_dword": 1, "buffer_load_dwordx2": 2, "buffer_load_dwordx4": 4}[i.op]
    rsrc = w.sval(i.args[2], 128)
    base, stride, records = rsrc & 0xFFFFFFFFFFFF, (rsrc >> 48) & 0x3FFF, (rsrc >> 64) & 0xFFFFFFFF
    if stride or "offen" not in i.mods or "idxen" in i.mods or w.sval(i.args[3]) != 0:
        raise NotImplementedError(f"buffer addressing other than raw offen with soffset 0: {i.line}")
    offset = w.vsrc(i.args[1]).astype(np.int64) + int(i.mods.get("offset", "0"), 0)
    act = w.active()
    data = np.zeros((WAVE, n), U32)
    for d in range(n):
        at = offset + 4 * d
        ok = act & (at + 4 <= records)
        if ok.any():
            data[ok, d] = w.mem.read((base + at[ok]).astype(U64), 4).view(U32).reshape(-1)
    w.set_block(i.args[0], data)
