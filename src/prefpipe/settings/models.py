"""Imported models (`models.<name>`): a model file turned once into a plain save_pretrained folder by the
import_model rule (results/models/<name>/model) and referenced as `import:<name>`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.settings.run import RunSettings


@dataclass
class ModelImportSettings(RunSettings):
    stage_schema: ClassVar[str] = "models.schema.yaml#/$defs/entry"
    derived_keys: ClassVar[tuple[str, ...]] = ("name",)

    name: str  # the `models` key; the folder is results/models/<name>/model
    gguf: str  # a GGUF file: a path or pkg:<module>/<file>
    dtype: str  # float32 | bfloat16 | float16: weights of the saved folder
