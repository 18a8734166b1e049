"""HashCursor: sha256 of pieces reported in any order, read back from the file when ahead."""

from __future__ import annotations

import hashlib
import os
import random
import threading
from pathlib import Path

from gpuci.hashcursor import HashCursor


def _file_cursor(path: Path) -> tuple[HashCursor, int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return HashCursor(lambda buf, off, n: os.preadv(fd, [buf[:n]], off)), fd


def test_out_of_order_pieces_hash_like_the_whole_file(tmp_path: Path) -> None:
    data = os.urandom(3_000_000)
    cursor, fd = _file_cursor(tmp_path / "f")
    pieces = [(off, data[off : off + 100_000]) for off in range(0, len(data), 100_000)]
    random.Random(7).shuffle(pieces)
    for off, piece in pieces:  # written first, then reported: the rule for callers
        os.pwrite(fd, piece, off)
        cursor.landed(off, [piece])
    os.close(fd)
    assert cursor.position == len(data)
    assert cursor.hexdigest() == hashlib.sha256(data).hexdigest()


def test_concurrent_writers(tmp_path: Path) -> None:
    data = os.urandom(4_000_000)
    cursor, fd = _file_cursor(tmp_path / "f")

    def writer(start: int, end: int) -> None:
        for off in range(start, end, 65_536):
            piece = data[off : min(off + 65_536, end)]
            os.pwrite(fd, piece, off)
            cursor.landed(off, [piece[:1000], piece[1000:]])

    quarter = len(data) // 4
    threads = [
        threading.Thread(target=writer, args=(i * quarter, (i + 1) * quarter)) for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)
    assert cursor.hexdigest() == hashlib.sha256(data).hexdigest()


def test_bytes_written_twice_are_hashed_once(tmp_path: Path) -> None:
    data = os.urandom(500_000)
    cursor, fd = _file_cursor(tmp_path / "f")
    os.pwrite(fd, data, 0)
    cursor.landed(0, [data[:300_000]])
    cursor.landed(200_000, [data[200_000:400_000]])  # overlaps what is hashed
    cursor.landed(400_000, [data[400_000:]])
    cursor.landed(100_000, [data[100_000:150_000]])  # entirely behind the cursor
    os.close(fd)
    assert cursor.position == len(data)
    assert cursor.hexdigest() == hashlib.sha256(data).hexdigest()


def test_resumed_ranges_are_read_back_when_reached(tmp_path: Path) -> None:
    data = os.urandom(1_000_000)
    cursor, fd = _file_cursor(tmp_path / "f")
    os.pwrite(fd, data, 0)
    cursor.landed_on_disk(600_000, 400_000)  # a later segment from an earlier run
    cursor.landed_on_disk(0, 300_000)  # the prefix: hashed at once
    assert cursor.position == 300_000
    cursor.landed(300_000, [data[300_000:600_000]])
    os.close(fd)
    assert cursor.position == len(data)
    assert cursor.hexdigest() == hashlib.sha256(data).hexdigest()


def test_the_mirror_gets_exactly_the_hashed_bytes_in_order(tmp_path: Path) -> None:
    """Pieces out of order, some reported twice (a retried range) or read back from the file:
    the mirror (the tier's copy) is told each byte once, in order, as the hash eats it."""
    data = os.urandom(2_000_000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    told: list[tuple[int, bytes]] = []
    cursor = HashCursor(
        lambda buf, off, n: os.preadv(fd, [buf[:n]], off),
        mirror=lambda view, at: told.append((at, bytes(view))),
    )
    pieces = [(off, data[off : off + 150_000]) for off in range(0, len(data), 150_000)]
    pieces += [(off + 50_000, data[off + 50_000 : off + 120_000]) for off, _ in pieces[::3]]
    random.Random(11).shuffle(pieces)
    for off, piece in pieces:
        os.pwrite(fd, piece, off)
        cursor.landed(off, [piece[:7], piece[7:]])
    os.close(fd)
    assert [at for at, _ in told] == sorted(at for at, _ in told)
    assert b"".join(chunk for _, chunk in told) == data
    assert cursor.hexdigest() == hashlib.sha256(data).hexdigest()
