"""The annex of the GRPO update's speed paths: each module here computes what a plain module in
grpo/algorithm/ or grpo/ computes, faster, and names that plain path and the test that proves them equal
(tests/test_grpo_fast_paths.py).

| fast path | plain path it must match |
|---|---|
| shared_prompt.py: each prompt forwarded once per group (KV cache, or one packed call) | grpo/logprobs.py `completion_logprobs` |
| packing.py: unpadded and shared-prompt micro-batches | grpo/algorithm/spans.py `plain_span` |

The run-wide setting `fast_paths` (config.yaml; `GrpoSettings.fast_paths`) picks them: false sends log-probs and
micro-batches to the plain paths (the same decisions within the tests' tolerance). The decode annex is
grpo/rollout/fast/.
"""
