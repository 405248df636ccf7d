"""Usage: python ws_big.py URL TRIES BYTES

Opens TRIES WebSockets to URL with the websocket-client package, one after the other; each
sends one binary message of BYTES, then reads until the server's Close and prints its code, or
`error NAME` when the client failed before it saw one.
"""

import struct
import sys

import websocket

url, tries, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(tries):
    try:
        ws = websocket.create_connection(url, timeout=30)
        ws.send_binary(b"x" * size)
        while True:
            opcode, data = ws.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                print(struct.unpack("!H", data[:2])[0] if len(data) >= 2 else "none")
                break
        ws.close()
    except Exception as e:  # the defect this checks for raised BrokenPipeError here
        print(f"error {type(e).__name__}")
