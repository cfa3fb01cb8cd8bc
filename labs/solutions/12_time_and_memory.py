"""Lab 12 reference solutions. SPOILER: do the lab first (labs/12_time_and_memory.py)."""


def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bits):
    elements = 2 * layers * kv_heads * head_dim * tokens           # a key and a value each
    return elements * bits / 8


def decode_step_bytes(params, bits_per_weight, kv_bytes_per_token, context):
    return params * bits_per_weight / 8 + context * kv_bytes_per_token


def roofline_seconds(flops, nbytes, peak_flops, bandwidth):
    return max(flops / peak_flops, nbytes / bandwidth)
