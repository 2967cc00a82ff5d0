"""Resident memory of `memcli serve` while clients post bodies over the 32 MB limit.

    python -m bench.body_limit                 # 3 concurrent 100 MB posts, both framings
    python -m bench.body_limit --clients 3 --mb 100 --mode chunked

Starts a real `memcli serve --port P --no-token` over a fresh database (hash embedder) in a
temporary folder, reads its resident set size (VmRSS, /proc) before, then samples it every
5 ms while `--clients` threads each post `--mb` MB of JSON to `/api/v1/events` at once:
with a `Content-Length` header (`length`) and as a chunked body (`chunked`). Prints the
baseline, the peak and the growth per mode, and what each client was answered. Linux only.

Target: growth under 40 MB for 3 concurrent 100 MB posts with a length (refused with 413
before a byte is read). A chunked body states no length: the server holds up to the limit
(32 MB) of each before it knows, so its bound is clients x 32 MB, not the body's size.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1024 * 1024


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(folder: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "HOME": str(folder), "XDG_RUNTIME_DIR": str(folder / "run"),
           "XDG_CONFIG_HOME": str(folder / "config"), "MEMCLI_EMBEDDER": "hash"}
    (folder / "run").mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve", "--db",
                             str(folder / "memory.db"), "--port", str(port), "--no-token"],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"memcli serve exited: {proc.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if b"200" in sock.recv(100):
                    warm(port)
                    return proc
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("memcli serve did not answer")


def warm(port: int) -> None:
    """One small write and one query first: the baseline then holds the code and the open
    database every request needs, and growth is what the big bodies cost."""
    for path, body in (("/api/v1/events", b'{"session_id": "s1", "content": {"text": "hi"}}'),
                       ("/api/v1/query", b'{"query": "hi"}')):
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         f"application/json\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            while sock.recv(65536):
                pass


def post(port: int, mb: int, mode: str, answers: list[str]) -> None:
    """Post `mb` MB of JSON (one array of spaces); record the status line answered."""
    head = ["POST /api/v1/events HTTP/1.1", "Host: 127.0.0.1",
            "Content-Type: application/json"]
    head.append(f"Content-Length: {mb * CHUNK}" if mode == "length"
                else "Transfer-Encoding: chunked")
    body = b" " * CHUNK
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            for i in range(mb):
                part = b"[" + body[2:] + b" " if i == 0 else body
                part = part[:-1] + b"]" if i == mb - 1 else part
                framed = f"{len(part):x}\r\n".encode() + part + b"\r\n" if mode == "chunked" \
                    else part
                sock.sendall(framed)
            if mode == "chunked":
                sock.sendall(b"0\r\n\r\n")
            answers.append(sock.recv(200).split(b"\r\n")[0].decode())
    except OSError as exc:  # refused early: the server closed while we still sent
        try:
            answers.append(sock.recv(200).split(b"\r\n")[0].decode() or str(exc))
        except OSError:
            answers.append(f"closed ({exc.__class__.__name__})")


def measure(port: int, pid: int, clients: int, mb: int, mode: str) -> dict:
    base = rss_mb(pid)
    peak, done = base, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    answers: list[str] = []
    threads = [threading.Thread(target=post, args=(port, mb, mode, answers))
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.5)  # what the server still held once every client was answered
    done.set()
    sampler.join()
    return {"mode": mode, "clients": clients, "mb": mb, "rss_before_mb": round(base, 1),
            "rss_peak_mb": round(peak, 1), "growth_mb": round(peak - base, 1),
            "answers": sorted(answers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--mode", choices=["length", "chunked", "both"], default="both")
    args = parser.parse_args()
    modes = ["length", "chunked"] if args.mode == "both" else [args.mode]
    with tempfile.TemporaryDirectory(prefix="memcli-body-") as tmp:
        port = free_port()
        proc = start(Path(tmp), port)
        try:
            for mode in modes:
                print(json.dumps(measure(port, proc.pid, args.clients, args.mb, mode)))
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
