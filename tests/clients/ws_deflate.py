"""Usage: python ws_deflate.py URL

The `websockets` package against an echo endpoint. It offers permessage-deflate and, unlike
browsers' reading side, compresses what it sends with its context kept across messages, so
later messages refer back into earlier ones. Prints the extensions agreed, then sends 50
chat-like JSON messages (each a variation of the last) and a 40 KB one, and prints
`echo ok N` once every echo matched (or what differed).
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect


async def main(url):
    async with connect(url, max_size=1 << 20) as ws:
        agreed = ws.response.headers.get("Sec-WebSocket-Extensions")
        print(f"extensions: {agreed}")
        sent = [
            json.dumps({"id": i, "user": f"member-{i % 7}", "room": "lobby",
                        "text": f"message number {i}, hello again, everyone"})
            for i in range(50)
        ]
        sent.append(json.dumps([{"id": i, "text": "hello " * 10} for i in range(500)]))
        for i, message in enumerate(sent):
            await ws.send(message)
            echo = await ws.recv()
            if echo != message:
                print(f"echo {i} differs")
                return 1
        print(f"echo ok {len(sent)}")
    return 0


sys.exit(asyncio.run(main(sys.argv[1])))
