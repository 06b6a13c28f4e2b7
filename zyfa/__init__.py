"""zyfa: FP8 (E4M3) and BF16 causal prefill attention with lean probabilities."""
from .api import explain, flash_attn_func
from .quantize import FP8Inputs, quantize_fp8, quantize_fp8_varlen, quantize_int8_qk
from .varlen import flash_attn_varlen_func
from .decode import KVCachePlan, explain_kvcache, flash_attn_with_kvcache, plan_kvcache
from .mixed import explain_varlen

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "plan_kvcache", "KVCachePlan",
           "explain_kvcache", "explain_varlen", "explain",
           "quantize_fp8", "quantize_fp8_varlen", "quantize_int8_qk", "FP8Inputs"]
__version__ = "0.1.0"
