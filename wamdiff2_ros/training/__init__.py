"""Training: AR teacher (sft), progressive block adaptation (adapt) and distillation (distill)."""
