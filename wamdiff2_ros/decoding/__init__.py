"""Decoding layer: AR and block-diffusion decoders, commit rules, exact KV cache, grammar. No ROS."""
