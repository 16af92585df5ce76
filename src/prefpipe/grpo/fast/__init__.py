"""The annex of GRPO speed paths: each module here computes what a plain module in grpo/ computes, faster, and
names that plain path and the test that proves them equal (tests/test_grpo_fast_paths.py).

| fast path | plain path it must match |
|---|---|
| decode.py `decode_compact`: finished rows leave the batch; LeanLlama steps | sampling.py `decode` |
| lean_decode.py `LeanLlama`: one decode step without the transformers forward | the model's forward |
| shared_prompt.py: each prompt forwarded once per group (KV cache, or one packed call) | logprobs.py `completion_logprobs` |
| packing.py: unpadded and shared-prompt micro-batches | spans.py `plain_span` |

The run-wide setting `fast_paths` (config.yaml; `GrpoSettings.fast_paths`) picks them: false sends generation,
log-probs and micro-batches to the plain paths (the same decisions within the tests' tolerance).
"""
