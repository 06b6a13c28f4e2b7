"""`zyfa bench`: every zyfa path and the anchors (FlashAttention-3, cuDNN, PyTorch SDPA)
measured side by side in one process: TFLOP/s, error against float64, TFLOP/J, SM clock.

Modules: cases (shapes and FLOPs), methods (what is timed), measure (timing, energy,
error), report (RESULTS.md and plots), run (the command).
"""
