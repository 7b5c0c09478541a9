"""What every HTTP shape shares: camelCase names on the wire, unknown fields refused, and
JSON types taken as they are (no "3" for 3, no true for 1)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict
from pydantic.alias_generators import to_camel

StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]
Seconds = Annotated[float, Strict(), Field(allow_inf_nan=False)]


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
