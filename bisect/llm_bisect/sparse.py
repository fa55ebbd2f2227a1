"""Documents whose absent keys stay absent: facts a build or a step may not have."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Sparse(BaseModel):
    """A document whose keys absent when it was made stay absent when it is written: facts a
    build or a step may not have (a fingerprint without an image, a localisation that failed)
    keep the shape the untyped writers gave them. Unknown keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_serializer(mode="wrap")
    def _only_given(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in given} if isinstance(data, dict) else data
