"""The learner: GRPO loss, the policy engine (LoRA via PEFT + DeepSpeed) shared with the warm start, adapter publishing and checkpoints."""
