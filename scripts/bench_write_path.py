#!/usr/bin/env python3
"""Client CPU of ways to land a ranged body in a file, without an S3 server's noise.

A child process serves byte ranges of one cached file over loopback with ``sendfile`` (the
cheapest possible server); this process fetches 4 x 512 MiB (``--file-size``) over N
connections, each file cut into parts written at their offsets, sha256 over every byte, in one
of several ways, and reports wall time and this process's user and system CPU, median of the
rounds (variants interleaved).
It is how the restore's big-file write path was chosen (docs/benchmarks.md, "Big-file write
path"); the hash here is per part, not in file order, which costs the same per byte.

    python scripts/bench_write_path.py                       # every variant, 3 rounds
    python scripts/bench_write_path.py --rounds 5 copy-4M copy-256K splice-pread
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import mmap
import multiprocessing
import os
import socket
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

FILES = 4
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass
class Variant:
    how: str  # copy | splice-pread | splice-mmap
    connections: int = 8
    parts_per_file: int = 8
    chunk: int = 4 << 20  # recv_into buffer (copy)
    write: int = 0  # pwrite + hash slice (copy); 0 = the whole chunk
    pipe: int = 1 << 20  # pipe size (splice)


VARIANTS = {
    "copy-4M": Variant("copy"),  # main before issue 16: 4 MiB recv, one 4 MiB pwrite
    "copy-1M": Variant("copy", write=1 << 20),
    "copy-256K": Variant("copy", write=256 << 10),  # the copying path now
    "copy-64K": Variant("copy", write=64 << 10),
    "one-writer-per-file-4M": Variant("copy", connections=4, parts_per_file=1),
    "one-writer-per-file-256K": Variant("copy", connections=4, parts_per_file=1, write=256 << 10),
    "splice-pread": Variant("splice-pread"),  # the plain-http path now
    "splice-mmap": Variant("splice-mmap"),
    "splice-pread-pipe256K": Variant("splice-pread", pipe=256 << 10),
    "splice-pread-pipe64K": Variant("splice-pread", pipe=64 << 10),
    "splice-pread-32conn": Variant("splice-pread", connections=32),
    "copy-256K-32conn": Variant("copy", connections=32, write=256 << 10),
}


def serve(source: str, ports: multiprocessing.Queue) -> None:
    """Answer ``"<offset> <length>\\n"`` with those bytes of ``source``, many connections."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    ports.put(listener.getsockname()[1])
    fd = os.open(source, os.O_RDONLY)

    def one(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as requests:
            for line in requests:
                offset, length = map(int, line.split())
                while length:
                    n = os.sendfile(conn.fileno(), fd, offset, length)
                    offset, length = offset + n, length - n

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def fetch_copy(conn: socket.socket, fd: int, start: int, end: int, v: Variant, buf) -> None:
    hasher, pos = hashlib.sha256(), start
    while pos < end:
        want, got = min(v.chunk, end - pos), 0
        while got < want:
            got += conn.recv_into(buf[got:want], want - got, socket.MSG_WAITALL)
        step = v.write or want
        for at in range(0, want, step):
            piece = buf[at : min(at + step, want)]
            os.pwrite(fd, piece, pos + at)
            hasher.update(piece)
        pos += want


def fetch_splice(conn: socket.socket, fd: int, start: int, end: int, v: Variant, pipe) -> None:
    hasher, pos, scratch = hashlib.sha256(), start, memoryview(bytearray(256 << 10))
    r, w = pipe
    while pos < end:
        batch = pos
        while pos < min(end, batch + (4 << 20)):
            n = os.splice(conn.fileno(), w, min(v.pipe, end - pos))
            moved = 0
            while moved < n:
                moved += os.splice(r, fd, n - moved, offset_dst=pos + moved)
            pos += n
        if v.how == "splice-mmap":
            with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mapped:
                view = memoryview(mapped)
                hasher.update(view[batch:pos])
                view.release()
        else:
            for at in range(batch, pos, len(scratch)):
                got = os.preadv(fd, [scratch[: min(len(scratch), pos - at)]], at)
                hasher.update(scratch[:got])


def run(v: Variant, port: int, dest: Path, file_size: int) -> tuple[float, float, float]:
    fds = []
    for i in range(FILES):
        fd = os.open(dest / f"{i}.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, file_size)
        fds.append(fd)
    part = file_size // v.parts_per_file
    tasks = [(f, p * part) for p in range(v.parts_per_file) for f in range(FILES)]
    lock = threading.Lock()

    def worker() -> None:
        conn = socket.create_connection(("127.0.0.1", port))
        buf = memoryview(mmap.mmap(-1, v.chunk))
        pipe = None
        if v.how.startswith("splice"):
            pipe = os.pipe()
            fcntl.fcntl(pipe[1], F_SETPIPE_SZ, v.pipe)
        while True:
            with lock:
                if not tasks:
                    break
                f, start = tasks.pop(0)
            conn.sendall(f"{start} {part}\n".encode())
            if pipe is None:
                fetch_copy(conn, fds[f], start, start + part, v, buf)
            else:
                fetch_splice(conn, fds[f], start, start + part, v, pipe)
        conn.close()
        if pipe is not None:
            os.close(pipe[0])
            os.close(pipe[1])

    threads = [threading.Thread(target=worker) for _ in range(v.connections)]
    started, cpu = time.monotonic(), os.times()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, after = time.monotonic() - started, os.times()
    for fd in fds:
        os.close(fd)
    return wall, after.user - cpu.user, after.system - cpu.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", help=f"default all: {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--file-size", type=int, default=512 << 20, help="bytes, 4 files")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-wpath"))
    args = parser.parse_args()
    work = Path(args.workdir)
    dest = work / "dest"
    dest.mkdir(parents=True, exist_ok=True)
    source = work / "source.bin"
    if not source.exists() or source.stat().st_size != args.file_size:
        source.write_bytes(os.urandom(args.file_size))
    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(str(source), ports), daemon=True)
    server.start()
    port = ports.get()
    names = args.variants or list(VARIANTS)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for old in dest.iterdir():
                old.unlink()
            os.sync()
            got = run(VARIANTS[name], port, dest, args.file_size)
            results[name].append(got)
            print(
                f"{name:26s} wall {got[0]:.2f} user {got[1]:.2f} sys {got[2]:.2f} "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print("\n| variant | wall s | user s | sys s |\n|---|---|---|---|")
    for name, runs in results.items():
        med = [statistics.median(r[i] for r in runs) for i in range(3)]
        print(f"| {name} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} |")
    server.kill()
    for old in dest.iterdir():
        old.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
