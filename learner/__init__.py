"""GRPO loss, LoRA trainer (PEFT + DeepSpeed), learner actor and checkpoints: issue 4."""
