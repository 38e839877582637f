"""The kinds of session a database holds, one per framework, as ``chatledger sessions``
names them (its ``--kind`` choices): light to import, for the argument parser."""

from __future__ import annotations

#: zett-agent's, rein-agent's, the OpenAI Agents SDK's (``openai``) and Google ADK's (``adk``).
KINDS = ("zett", "rein", "openai", "adk")
