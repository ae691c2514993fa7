"""Async usage: AsyncMemory runs each call in a worker thread, so the event loop never blocks.

Run: python examples/async_usage.py
"""

from __future__ import annotations

import asyncio

import memlane


async def main() -> None:
    async with memlane.AsyncMemory() as mem:
        await mem.add_many(
            [{"text": f"Ticket {n}: the export of report {n} timed out."} for n in range(20)]
            + [{"text": "Grace is on parental leave until March."}]
        )
        # Concurrent searches run in parallel: the engine releases the GIL.
        questions = ["Who is away until spring?", "Which exports failed?", "ticket 7"]
        results = await asyncio.gather(*(mem.search(q, k=1) for q in questions))
        for question, hits in zip(questions, results, strict=True):
            print(f"? {question}\n  {hits[0].score:.3f}  {hits[0].record.text}")
        assert results[0][0].record.text.startswith("Grace")
        assert results[2][0].record.text.startswith("Ticket 7:")
        print(f"{len(mem)} memories, {await mem.count()} counted")


if __name__ == "__main__":
    asyncio.run(main())
