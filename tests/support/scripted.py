"""An offline, scripted zett-agent model for tests: no network, no provider SDK.

``ScriptedModel`` implements ``zett_agent.model.AgentModel``: each ``stream`` call
answers with the next scripted reply (streamed as one text delta, then the
terminal ``ModelResponse``) and keeps the request, so a test can check exactly
what context the runtime sent to the model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from itertools import count

from zett_agent.messages import AnyMessage, AssistantMessage
from zett_agent.model import AgentModel, ModelEvent, ModelRequest, ModelResponse, ModelUsage, RetryOptions


class ScriptedModel:
    """Replies with the given texts (or messages) in order; fails when they run out.

    Args:
        replies: one entry per model call; a ``str`` becomes
            ``AssistantMessage(content=..., provider="scripted", model="scripted-1")``.
        usage: the ``ModelUsage`` reported with every response.
    """

    retry = RetryOptions(max_retries=0)

    def __init__(self, replies: Iterable[str | AssistantMessage], *, usage: ModelUsage | None = None) -> None:
        self.replies = list(replies)
        self.usage = usage if usage is not None else ModelUsage(input_tokens=11, output_tokens=3)
        #: Every request received, in order.
        self.requests: list[ModelRequest] = []
        self._calls = count()

    @property
    def contexts(self) -> list[list[AnyMessage]]:
        """The message list of each request, in order."""
        return [list(request.messages) for request in self.requests]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        index = next(self._calls)
        if index >= len(self.replies):
            raise AssertionError(
                f"ScriptedModel has {len(self.replies)} replies; call {index + 1} was not scripted"
            )
        reply = self.replies[index]
        message = (
            reply
            if isinstance(reply, AssistantMessage)
            else AssistantMessage(content=reply, provider="scripted", model="scripted-1")
        )
        if message.content:
            yield ModelEvent.text(message.content)
        yield ModelEvent.completed(ModelResponse(message=message, finish_reason="stop", usage=self.usage))


def _conforms(model: ScriptedModel) -> AgentModel:
    return model  # type-checks ScriptedModel against zett's AgentModel protocol
