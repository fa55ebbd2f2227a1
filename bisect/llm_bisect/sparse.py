"""Documents whose absent keys stay absent: facts a build or a step may not have."""

from __future__ import annotations

from typing import Any, ClassVar

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


class AddedLater(BaseModel):
    """A document that grew keys after its version was published: each of `added_later` is
    written only where it says something (not null, not empty), so a document without
    them keeps the shape older readers know."""

    added_later: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _said(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in self.added_later:
                if key in data and data[key] in (None, "", [], {}):
                    del data[key]
        return data
