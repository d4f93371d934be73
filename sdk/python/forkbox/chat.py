"""The daemon's agent loop (POST /v1/chat): ask a question about data; a
model runs code in the conversation's sandbox and answers."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

from . import wire
from ._client import Client, decode_event, failure_error, resolve_client
from .models import _Record

__all__ = ["chat", "ChatResponse"]


class ChatResponse(_Record[wire.ChatResponse]):
    """The answer: ``answer`` (text), ``images`` (``[{file_name,
    png_base64}]``), ``steps`` (``[{code, execution}]``), ``conversation_id``
    (pass it to continue), ``sandbox``, ``rounds``, ``truncated``."""

    _fields = ("answer", "images", "steps", "conversation_id", "sandbox", "rounds", "truncated")
    _defaults = {"images": [], "steps": [], "rounds": 0, "truncated": False}


def chat(question: str, csv: Optional[str] = None, conversation_id: Optional[str] = None, *,
         csv_name: Optional[str] = None, file_ids: Optional[List[str]] = None, model: Optional[str] = None,
         on_event: Optional[Callable[[Dict[str, Any]], Any]] = None, url: Optional[str] = None,
         api_key: Optional[str] = None, client: Optional[Client] = None) -> ChatResponse:
    """Asks the daemon's analyst a question, with CSV text to put in
    /workspace (as ``csv_name``, default data.csv) or uploaded file ids.
    ``on_event`` gets the loop's events as they happen (text deltas, tool
    calls, executions; dicts with a ``type``). UnavailableError when the
    daemon has no model configured."""
    c = resolve_client(client, url, api_key)
    body: wire.ChatRequest = {"question": question}
    if csv is not None:
        body["csv"] = csv
    if csv_name is not None:
        body["csv_name"] = csv_name
    if file_ids is not None:
        body["file_ids"] = file_ids
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    if model is not None:
        body["model"] = model
    if on_event is None:
        return ChatResponse(c.request_json("POST", "/v1/chat", None, body))

    def handle(ev):
        if ev.name == "error":
            raise failure_error(ev)
        doc = decode_event(ev)
        if ev.name == "done":
            return True, ChatResponse(doc)
        if isinstance(doc, dict):
            doc.setdefault("type", ev.name)
            on_event(doc)
        return False, None

    return c.stream("POST", "/v1/chat", json.dumps(body).encode("utf-8"), "application/json",
                    ChatResponse, handle, "chat")
