"""The sm_90a (Hopper) target: op table, assembly with ptxas, loading with cuda-python."""
