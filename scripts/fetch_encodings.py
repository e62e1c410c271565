"""Ship tiktoken's encoding files with the layer, so nothing ever downloads them at run time.

The files come from a pinned PyPI wheel (bpe-openai), are decompressed, checked against the sha256 that
tiktoken itself expects, and written under the file name tiktoken looks for in TIKTOKEN_CACHE_DIR
(sha1 of the encoding's URL).
"""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "bpe-openai==0.1.4"
# name -> (tiktoken's blob URL, tiktoken's expected sha256 of the decompressed file)
ENCODINGS = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
DEST = Path(__file__).resolve().parent.parent / "layers" / "common" / "precis" / "encodings"


def cache_name(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()


def present() -> bool:
    for url, sha in ENCODINGS.values():
        path = DEST / cache_name(url)
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            return False
    return True


def main() -> int:
    if present():
        return 0
    DEST.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                tmp,
                WHEEL,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("bpe_openai-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for name, (url, sha) in ENCODINGS.items():
                data = gzip.decompress(zf.read(f"bpe_openai/data/{name}.tiktoken.gz"))
                got = hashlib.sha256(data).hexdigest()
                if got != sha:
                    print(f"{name}: sha256 {got} from {wheel.name} is not tiktoken's {sha}", file=sys.stderr)
                    return 1
                (DEST / cache_name(url)).write_bytes(data)
                print(f"{name}: verified sha256 {sha[:12]}…, written to {DEST.relative_to(Path.cwd())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
