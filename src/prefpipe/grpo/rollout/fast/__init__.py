"""The annex of the GRPO rollout's speed paths: each module here computes what a plain module in
grpo/rollout/ computes, faster, and names that plain path and the test that proves them equal
(tests/test_grpo_fast_paths.py).

| fast path | plain path it must match |
|---|---|
| decode.py `decode_compact`: finished rows leave the batch; LeanLlama steps | grpo/rollout/sampling.py `decode` |
| lean_decode.py `LeanLlama`: one decode step without the transformers forward | the model's forward |
| static_decode.py `StaticDecode`: the lean step over fixed shapes, torch.compile'd (`rollout.compile_decode`) | lean_decode.py `LeanLlama.step` |

The run-wide setting `fast_paths` (config.yaml; `GrpoSettings.fast_paths`) picks them: false sends generation to
the plain decode loop (the same decisions within the tests' tolerance). The log-prob annex is grpo/algorithm/fast/.
"""
