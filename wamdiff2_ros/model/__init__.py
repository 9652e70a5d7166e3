"""Model layer: Qwen3-VL backbone through transformers, WAM-Diff2 prompt, masks, parsing. No ROS."""
