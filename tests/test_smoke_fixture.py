from zett_agent.messages import UserMessage

from chatledger.zett import LedgerSessionStorage


async def test_append_then_load(storage: LedgerSessionStorage, session_id: str) -> None:
    assert await storage.append(session_id, "r", UserMessage(content="hi")) == 1
    view = await storage.load(session_id)
    assert [record.sequence for record in view.raw_tail] == [1]
