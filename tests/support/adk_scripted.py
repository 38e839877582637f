"""An offline, scripted Google ADK model for tests: no network, no Gemini.

``ScriptedLlm`` is an ADK ``BaseLlm``: each model call answers with the next
scripted ``LlmResponse`` (a text, or a function call to a tool) and keeps the
request's contents, so a test can check what history the runner sent.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field


def text(reply: str) -> LlmResponse:
    """A model turn answering with ``reply``."""
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))


def call(tool: str, **args: Any) -> LlmResponse:
    """A model turn calling ``tool`` with ``args``."""
    return LlmResponse(
        content=types.Content(
            role="model", parts=[types.Part(function_call=types.FunctionCall(name=tool, args=args))]
        )
    )


class ScriptedLlm(BaseLlm):
    """Answers with ``replies`` in order; fails when they run out."""

    model: str = "scripted"
    replies: list[LlmResponse] = Field(default_factory=list)
    #: The contents of every request, in order.
    requests: list[list[types.Content]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(list(llm_request.contents))
        if not self.replies:
            raise AssertionError("the scripted model ran out of replies")
        yield self.replies.pop(0)
