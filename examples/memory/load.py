import socket, sys, threading, time, json
# load.py PORT N SIZE [--responses]: N concurrent SIZE-byte chat-completions requests, or
# Responses API requests (`input`, stored by default) with --responses.
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
responses = "--responses" in sys.argv[4:]
pad = "x" * (size - 200)
if responses:
    path, request = "/v1/responses", {"model": "m", "input": pad}
else:
    path, request = "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": pad}]}
body = json.dumps(request).encode()
codes = []
def one():
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % (path.encode(), len(body)))
        try:
            s.sendall(body)
        except OSError:
            pass
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk: break
            data += chunk
        codes.append(data[9:12].decode() or "closed")
    except OSError as e:
        codes.append("err:" + type(e).__name__)
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
from collections import Counter
print(dict(Counter(codes)))
