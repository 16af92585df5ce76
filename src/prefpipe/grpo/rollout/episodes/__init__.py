"""Multi-turn episodes: the policy writes a turn, the environment answers, until the policy answers
or hits a turn or token limit. How a turn ends and how a result goes back (format: the documented tag format;
a chat family's own tool format plugs in behind the same `ToolFormat`), the episode as one token sequence with
owned segments and its conversion to the trainer's `Rollout` with the environment tokens out of the loss
(episode), what a sampled token or a result does to an episode, shared by both engines (turns), the plain
engine's batched decode that keeps each row's KV cache across turns (decode), and the step's episodes through
an engine's decoder (generate; the vLLM engine's decoder is grpo/rollout/engines/vllm_episodes.py).
"""
