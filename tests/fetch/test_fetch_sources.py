"""Input parsing for retry-fetch: url lines, destinations, checksum files, mirrors, headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuci.errors import InputError
from gpuci.fetch._sources import build_jobs, parse_checksums, parse_headers

A = "a" * 64
B = "B" * 64


def test_single_url_with_dest_file(tmp_path: Path):
    (job,) = build_jobs(["https://h/x/model.bin"], "w/m.bin", A, None, tmp_path)
    assert (job.url, job.dest, job.sha256) == ("https://h/x/model.bin", tmp_path / "w/m.bin", A)


def test_single_url_into_an_existing_folder_or_trailing_slash(tmp_path: Path):
    (tmp_path / "d").mkdir()
    assert build_jobs(["http://h/f.bin"], "d", None, None, tmp_path)[0].dest == tmp_path / "d/f.bin"
    assert (
        build_jobs(["http://h/f.bin"], "e/", None, None, tmp_path)[0].dest == tmp_path / "e/f.bin"
    )


def test_lines_with_digest_and_dest_and_base_mirrors(tmp_path: Path):
    jobs = build_jobs(
        [f"http://h/a.bin {A} sub/a", "http://h/b%20c.bin -", f"http://h/c.bin {B}"],
        "out",
        None,
        ["http://m1/", "http://m2/files/"],
        tmp_path,
    )
    assert [j.dest for j in jobs] == [
        tmp_path / "out/sub/a",
        tmp_path / "out/b c.bin",
        tmp_path / "out/c.bin",
    ]
    assert [j.sha256 for j in jobs] == [A, None, B.lower()]
    assert jobs[1].mirrors == ("http://m1/b c.bin", "http://m2/files/b c.bin")


def test_list_file_and_checksum_url(tmp_path: Path):
    (tmp_path / "list.txt").write_text(f"# comment\nhttp://h/a.bin {A}\n\nhttp://h/b.bin\n")
    jobs = build_jobs(["@list.txt"], None, "http://h/SHA256SUMS", None, tmp_path)
    assert [(j.sha256, j.sha256_url) for j in jobs] == [(A, None), (None, "http://h/SHA256SUMS")]


def test_parse_checksums_forms():
    assert parse_checksums(f"{A}\n", "x", "u") == A
    assert parse_checksums(f"{A}  x.bin\n", "x.bin", "u") == A
    assert parse_checksums(f"{A}  other\n{B} *dir/x.bin\n", "x.bin", "u") == B.lower()
    with pytest.raises(InputError, match=r"no sha256 for 'y\.bin'"):
        parse_checksums(f"{A}  other\n{B}  x.bin\n", "y.bin", "u")


def test_headers_are_masked_as_they_are_parsed():
    masked: list[str] = []
    headers = parse_headers(["Authorization: Bearer abc:def", "X-Empty:"], masked.append)
    assert headers == {"Authorization": "Bearer abc:def", "X-Empty": ""}
    assert "Bearer abc:def" in masked
    with pytest.raises(InputError):
        parse_headers(["Bad Name: v"], masked.append)
