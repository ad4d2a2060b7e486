import socket, sys, threading, time, json
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pad = "x" * (size - 200)
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": pad}]}).encode()
codes = []
def one():
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
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
