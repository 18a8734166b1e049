"""``retry-fetch``: downloads that survive transient failures and resume where they stopped."""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

INPUTS = (
    Input(
        "url",
        "URL(s) to fetch, one per line as 'URL [SHA256|-] [DEST]'; or @FILE naming a file "
        "of such lines.",
        "lines",
        required=True,
    ),
    Input(
        "dest",
        "Destination file (one URL) or folder (several URLs, an existing folder, or a path "
        "ending in /); default: the current folder.",
        "str",
    ),
    Input(
        "sha256",
        "Expected sha256 (hex), or the URL of a .sha256 / SHA256SUMS file (matched by name).",
        "str",
    ),
    Input(
        "mirrors",
        "Fallback URLs tried in order after the main URL fails, one per line; one ending in "
        "'/' is a base the file name is appended to.",
        "lines",
    ),
    Input(
        "headers",
        "Extra request headers, 'Name: value' one per line (values masked).",
        "lines",
        secret=True,
    ),
    Input("attempts", "Attempts per URL before moving to the next mirror.", "int", "5", minimum=1),
    Input("timeout", "Per-attempt timeout for connecting and for each read.", "duration", "60s"),
    Input("deadline", "Total time allowed for the whole download.", "duration", "30m"),
    Input(
        "max-wait",
        "Longest backoff between attempts (Retry-After is capped by it too).",
        "duration",
        "60s",
    ),
    Input("parallel", "How many files to download at once.", "int", "4", minimum=1),
    Input(
        "connections",
        "Most ranged connections for one file. A large file from a server that names it with "
        "a strong ETag and honours Range is fetched in segments over several connections at "
        "once, as many as keep raising the throughput; 1 turns this off.",
        "int",
        "16",
        minimum=1,
    ),
    Input(
        "max-bytes",
        "Largest file accepted, e.g. 500MB or 100GiB, or 'none': a larger Content-Length is "
        "refused before writing and a longer body is cut off and deleted. The default fits any "
        "single Hugging Face Hub file (50 GB cap) yet stops an endless body long before it "
        "fills a runner's disk.",
        "size",
        "64GiB",
        minimum=1,
    ),
)

COMMAND = Command(
    name="retry-fetch",
    help="Download with retries of transient failures, resume, and sha256 verification.",
    inputs=INPUTS,
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
    target="gpuci.fetch:run",
    typed="gpuci.fetch.options:FetchInputs",
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
        '**Verified.** The headline says "verified" only for files checked against a '
        "sha256 you gave (`sha256`, a checksums URL, or the digest column of `url`); without "
        'one it says "downloaded", and the `sha256` output is what arrived.',
    ),
    actions=("actions/retry-fetch",),
)
