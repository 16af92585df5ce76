"""The torch process a stage runs in: the device it resolves and records (device), seeds (seeding), CPU kernel
pinning for bit-reproducible runs (determinism), the transformers API differences the package bridges
(transformers_api) and the errors a model load turns into clear messages (model_errors). Imports
prefpipe.common's modules only."""
