"""zyfa's contract, which every kernel is tested against; it imports nothing else of zyfa.

constants  the shared numbers (P offset, magic numbers, NEG_FLOOR, RESCALE_THRESHOLD, LN2)
e4m3       E4M3 bits and exactly emulated float32 / half arithmetic
rules      the P rules (lean rules as step lists) and reference rules
key_order  the key orders V^T is stored in for each target
descales   the descale shapes flash_attn_func takes and their normalized forms
shapes     the head dims of the API
reference  float64 attention and the blockwise FP8 spec, bit for bit in the P bits
kv_cache   a KV cache's descale shapes and float64 decode attention over it
"""
