"""``retry-fetch``: downloads that survive transient failures and resume where they stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.fetch.options import FetchInputs

COMMAND: Command[FetchInputs] = Command(
    name="retry-fetch",
    help="Download with retries of transient failures, resume, and sha256 verification.",
    outputs=(
        Output("path", "Path(s) of the file(s) in place, one per line."),
        Output("sha256", "Their sha256 digests, one per line."),
        Output("bytes", "Bytes in the final file(s)."),
        Output(
            "attempts",
            "Tries in all: one per file, plus one per retry after a failure (a whole file's or "
            "one segment's); a segmented download's planned ranged requests are not counted.",
        ),
        Output("resumed-bytes", "Bytes kept from earlier attempts instead of downloaded again."),
        Output("connections", "Most connections one file used at once (segmented downloads)."),
        Output("seconds", "Wall time."),
    ),
    target="gpuci.fetch._command:run",
    options="gpuci.fetch.options:FetchInputs",
    notes=(
        "**Credentials stay on their origin.** `headers` (and a `user:pass@` in the URL) go "
        "only to the URL's own origin (scheme, host, port). When a redirect leaves it, every "
        "one of them is dropped for the rest of the chain, even if a later hop comes back. No "
        "cookies are kept. A redirect to a URL that is not http(s) is refused.",
        "**Sizes and encodings.** A Content-Length over `max-bytes`, or over the free space "
        "where the file goes, is refused before a byte is written; a body that runs past "
        "`max-bytes` is cut off and its partial file deleted. retry-fetch asks for "
        "`Accept-Encoding: identity` and refuses any other Content-Encoding (exit 3) rather "
        "than decompress it, so the bytes on disk are the bytes the server sent.",
        "**Resume.** Bytes that arrived before a failure stay in `<dest>.incomplete`, with the "
        "URL and validator (ETag / Last-Modified) in `<dest>.incomplete.json`. A later run "
        "resumes from them only if both are regular files (never followed through a symlink), "
        "owned by the current user, not writable by group or others, and made for the same "
        "URL; anything else is deleted and the download starts over. A full disk deletes the "
        "partial file and says so (exit 3). See docs/security.md.",
        "**Segments.** A file of 16 MiB or more, from a server that sends a strong validator "
        "(an ETag not `W/`, or without an ETag a Last-Modified at least a second before its "
        "Date) and `Accept-Ranges: bytes`, is fetched over several ranged connections at once "
        "(up to `connections`). A far server (first answer in 25 ms or more) gets one per "
        "16 MiB at once, at most 8, as `aria2c -x8 -s8` does; a near one starts with one; "
        "either grows while the throughput does. Every segment carries `If-Range` and must "
        "come back as a 206 for exactly the bytes asked; a server that ignores Range or lies "
        "falls back to one connection, a changed file starts over. The written segments are "
        "recorded in the sidecar every 0.25 s (flushed to disk first), so a cut or a killed "
        "run resumes each one. sha256 covers the whole file.",
        "**Time limits.** `timeout` bounds each connect and each read. After a response's "
        "first `timeout`, its body must keep `min-rate` (default 256KiB a second, or "
        "`GPUCI_FETCH_MIN_RATE`; counted on the bytes that came, for each segment and a "
        "checksum file too): a server trickling a byte inside every read's timeout fails "
        "that attempt, which is retried and resumes from the bytes kept. `deadline` bounds "
        "the whole download, retries and waits included; `max-wait` caps each wait between "
        "attempts (a `Retry-After` too). Ctrl-C ends every download and every retry's wait "
        "at once; nothing is renamed into place after it.",
        '**Verified.** The headline says "verified" only for files checked against a '
        "sha256 you gave (`sha256`, a checksums URL, or the digest column of `url`); without "
        'one it says "downloaded", and the `sha256` output is what arrived.',
    ),
    actions=("actions/retry-fetch",),
)
