"""The encoder core every member builds on: attention, the encoder and its layer styles, embeddings, heads, the
unpadded (varlen) path, rotary and relative positions, the stream memory, and the torch-free schemas (config_schema.py,
member.py, capabilities.py, flops_terms.py). Nothing here imports a member."""
