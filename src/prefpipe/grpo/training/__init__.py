"""GRPO training: the loop that samples, scores and updates step after step with checkpoints and metrics
(trainer), a step's batch of prompts, uniforms, rewards and advantages (step_batch) and the train_grpo stage
(stage; entry module prefpipe.train_grpo). The top room: may import every other grpo room and the shared
modules, and nothing in grpo imports it.
"""
