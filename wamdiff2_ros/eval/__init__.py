"""Driving metrics (open and closed loop), detection mAP, QA exact match and the baseline policies."""
