"""prepare.py and tablefree/tokenizer.py on small local corpora. Run: python -m pytest tests/test_prepare.py"""

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import prepare
from conftest import ROOT
from tablefree import corpus
from tablefree.common import UserError
from tablefree.tokenizer import load_tokenizer, train_bpe

WORDS = "the king queen crown sword horse castle river night morning bread wine letter".split()


def make_docs(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80))) + f"\ndocument {i}." for i in range(n)]


def run(tmp_path, *argv):
    return prepare.prepare(prepare.parse_args(["--out_dir", str(tmp_path / "data"), "--quiet", *argv]))


def read_split(directory, meta, split):
    return np.concatenate([np.fromfile(directory / f, dtype=meta["dtype"]) for f in meta["splits"][split]["files"]])


@pytest.fixture
def corpus_files(tmp_path):
    paths = []
    for i, doc in enumerate(make_docs(60)):
        path = tmp_path / f"doc{i:02d}.txt"
        path.write_text(doc)
        paths.append(path)
    return paths


def test_bins_hold_exactly_the_tokenizer_output(tmp_path, corpus_files):
    meta = run(tmp_path, "--input", str(tmp_path / "doc*.txt"), "--name", "docs", "--vocab_size", "300")
    directory = tmp_path / "data" / "docs"
    enc = load_tokenizer(directory, meta["tokenizer"])
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 300 and enc.eot_token == 299
    for split in ("train", "val"):
        docs = [p.read_text() for p in corpus_files]
        docs = [d for p, d in zip(corpus_files, docs) if (zlib.crc32(p.name.encode()) / 2 ** 32 < 0.1) == (split == "val")]
        expected = [t for d in docs for t in enc.encode_ordinary(d) + [enc.eot_token]]
        got = read_split(directory, meta, split)
        assert got.dtype == np.uint16 and got.tolist() == expected
        assert meta["splits"][split]["tokens"] == len(expected)
        assert meta["splits"][split]["bytes"] == sum(len(d.encode()) for d in docs)
        assert enc.decode(got.tolist()) == "<|endoftext|>".join(docs) + "<|endoftext|>"  # round trip
    assert meta["splits"]["val"]["tokens"] > 0


def test_bpe_round_trips_any_text():
    ranks, _ = train_bpe(make_docs(30), 350)
    import tiktoken
    from tablefree.tokenizer import GPT2_PATTERN
    enc = tiktoken.Encoding("t", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    for text in ["the king's horse\n\n  rides", "naïve café — 東京 🐍", "\x00\xff odd bytes\t"]:
        assert enc.decode(enc.encode_ordinary(text)) == text


def test_bpe_never_sees_validation_text(tmp_path):
    train = "\n".join(make_docs(40))
    val = "\n".join(["zyxquv " * 50] * 20)  # a word repeated only in the last part: a BPE that saw it would merge it
    path = tmp_path / "book.txt"
    path.write_text(train + "\n" + val)
    meta = run(tmp_path, "--input", str(path), "--vocab_size", "350", "--val_fraction", str(len(val) / (len(train) + len(val)) + 0.01))  # cut just before val
    enc = load_tokenizer(tmp_path / "data" / "book", meta["tokenizer"])
    tokens = [enc.decode_single_token_bytes(i) for i in range(1, enc.eot_token)]  # id 0 is reserved
    assert not any(b"zyx" in t or b"quv" in t for t in tokens)
    assert any(b"king" in t for t in tokens)  # it did learn the training words


def test_split_is_deterministic_and_order_free(tmp_path, corpus_files):
    first = run(tmp_path, "--input", str(tmp_path / "doc*.txt"), "--name", "a", "--vocab_size", "300")
    again = run(tmp_path, "--input", str(tmp_path / "doc*.txt"), "--name", "a", "--vocab_size", "300", "--force")
    assert first["splits"] == again["splits"] and first["text_sha256"] == again["text_sha256"]
    docs = [p.read_text() for p in corpus_files]
    val_docs = []
    for order in range(2):  # the same rows in another order: the same val documents
        random.Random(order).shuffle(docs)
        (tmp_path / f"rows{order}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        meta = run(tmp_path, "--input", str(tmp_path / f"rows{order}.jsonl"), "--vocab_size", "300")
        enc = load_tokenizer(tmp_path / "data" / f"rows{order}", meta["tokenizer"])
        val = enc.decode(read_split(tmp_path / "data" / f"rows{order}", meta, "val").tolist())
        val_docs.append(sorted(val.split("<|endoftext|>")))
    assert val_docs[0] == val_docs[1] and len(val_docs[0]) > 2


def test_large_files_are_read_in_pieces_that_tokenize_as_the_whole(tmp_path, monkeypatch):
    text = "\n".join(make_docs(200)) + "\n\n  indented line\n\tand a tab\n  \nend"
    path = tmp_path / "big.txt"
    path.write_text(text)
    monkeypatch.setattr(corpus, "PIECE_BYTES", 500)  # many pieces, cut between every kind of line
    pieces = list(corpus.text_pieces(path))
    assert len(pieces) > 50 and "".join(pieces) == text
    meta = run(tmp_path, "--input", str(path), "--vocab_size", "300")
    enc = load_tokenizer(tmp_path / "data" / "big", meta["tokenizer"])
    cut = text.find("\n", int(len(text.encode()) * 0.9)) + 1  # ASCII: bytes are characters
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        assert read_split(tmp_path / "data" / "big", meta, split).tolist() == enc.encode_ordinary(part) + [enc.eot_token]


def test_hub_path_on_a_local_file_of_the_hub_schema(tmp_path):
    rows = [{"text": d, "id": f"<urn:{i}>", "url": "http://x", "score": 3.1, "token_count": 9} for i, d in enumerate(make_docs(80))]
    (tmp_path / "fineweb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["--dataset", "fineweb-edu", "--hub_data_files", str(tmp_path / "fineweb.jsonl"), "--vocab_size", "300"]
    one = run(tmp_path, *common, "--name", "one")
    sharded = run(tmp_path, *common, "--name", "sharded", "--workers", "2", "--shard_tokens", "1000")
    assert one["source"] == "hub:HuggingFaceFW/fineweb-edu"
    assert len(sharded["splits"]["train"]["files"]) > 2 and sharded["splits"]["train"]["files"][0] == "train-00000.bin"
    for split in ("train", "val"):  # two processes and many shards hold the same tokens as one file
        assert np.array_equal(read_split(tmp_path / "data" / "one", one, split), read_split(tmp_path / "data" / "sharded", sharded, split))
    budget = run(tmp_path, *common, "--name", "budget", "--max_tokens", "500", "--val_fraction", "0.5")
    assert 500 <= budget["splits"]["train"]["tokens"] < 500 + 200  # whole documents, each < 200 tokens


def test_an_unreachable_hub_is_one_line_naming_the_network_not_the_disk(tmp_path):
    """Offline, the hub's ConnectionError is an OSError: it once came out as "cannot write ...: free some disk
    space". It names the hub and the local files instead, and nothing is written."""
    pytest.importorskip("datasets")
    done = subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--dataset", "fineweb-edu", "--max_tokens", "1000",
                           "--out_dir", str(tmp_path / "data")], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("prepare.py: error: cannot read fineweb-edu from the Hugging Face hub (") and \
        done.stderr.endswith("nothing was written: reach the hub (the network, HF_HUB_OFFLINE unset), or give local "
                             "files of its schema with --hub_data_files\n")
    assert not (tmp_path / "data" / "fineweb-edu").exists()


def test_up_to_date_output_is_skipped(tmp_path, corpus_files, capsys):
    book = tmp_path / "book.txt"
    book.write_text("\n".join(make_docs(10)))
    run(tmp_path, "--input", str(book), "--vocab_size", "260")
    run(tmp_path, "--input", str(book), "--vocab_size", "260")
    assert "up to date" in capsys.readouterr().out
    book.write_text("\n".join(make_docs(10, seed=1)))
    before = (tmp_path / "data" / "book" / "train.bin").read_bytes()
    with pytest.raises(UserError, match="holds a dataset prepared with other settings .input_stamps.; runs trained"):
        run(tmp_path, "--input", str(book), "--vocab_size", "260")  # edited text: never swapped in silently
    assert (tmp_path / "data" / "book" / "train.bin").read_bytes() == before
    run(tmp_path, "--input", str(book), "--vocab_size", "260", "--force")
    assert "up to date" not in capsys.readouterr().out
    meta = tmp_path / "data" / "book" / "meta.json"
    good = meta.read_text()
    for damaged in (good[:20], "[]", "\udcff"):  # torn, not an object, not UTF-8: no longer ours by its mark
        meta.write_bytes(damaged.encode("utf-8", "surrogateescape"))
        with pytest.raises(UserError, match="book holds files this command did not write .* move that one away"):
            run(tmp_path, "--input", str(book), "--vocab_size", "260")  # one line, and nothing replaced
        assert meta.read_bytes() == damaged.encode("utf-8", "surrogateescape")


def files(folder):
    """{name: bytes} of every file in folder."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def test_interrupted_write_leaves_the_old_dataset_whole(tmp_path, corpus_files, monkeypatch):
    args = ["--input", str(tmp_path / "doc*.txt"), "--name", "x", "--vocab_size", "300"]
    run(tmp_path, *args)
    before = files(tmp_path / "data" / "x")

    def killed(self, ids):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare.ShardWriter, "write", killed)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, *args, "--force")
    directory = tmp_path / "data" / "x"
    assert files(directory) == before  # the old dataset, whole: the new one was built beside it
    assert not (tmp_path / "data" / "x.tmp").exists()  # and the half-built one is gone


def test_corrupt_local_source_is_refused(tmp_path):
    sources = tmp_path / "data" / "_sources"
    sources.mkdir(parents=True)
    (sources / "tinyshakespeare.txt").write_text("First Citizen:\nBefore we proceed any further, hear me spook.\n")
    with pytest.raises(UserError, match="corrupt"):
        run(tmp_path)


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "wikitext"], "unknown dataset 'wikitext'"),
    (["--input", "/nonexistent/*.txt"], "matches no files"),
    (["--tokenizer", "nope"], "unknown tiktoken encoding 'nope'"),
    (["--vocab_size", str(2 ** 32 + 1)], "to 16,777,216, not 4294967297"),
])
def test_bad_input_is_a_one_line_error(tmp_path, corpus_files, argv, message, capsys):
    if argv[0] != "--dataset" and argv[0] != "--input":
        argv = ["--input", str(corpus_files[0]), *argv]
    with pytest.raises(SystemExit) as exit:
        prepare.main(["--out_dir", str(tmp_path / "data"), "--quiet", *argv])
    assert message in str(exit.value) and "\n" not in str(exit.value)


def test_undecodable_and_empty_inputs(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ".encode("latin1") * 100)
    with pytest.raises(UserError, match="not valid UTF-8 .near byte 3."):
        run(tmp_path, "--input", str(tmp_path / "latin1.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UserError, match="empty.txt is empty; give a file with text"):
        run(tmp_path, "--input", str(tmp_path / "empty.txt"))


def test_a_file_with_no_line_in_its_val_part_names_a_fix_that_works(tmp_path):
    """val starts at a line start in the file's last --val_fraction: one line has none, and a file whose
    last line is long has none in its last 10%; the fraction the error suggests is followed here."""
    (tmp_path / "one.txt").write_text("to be or not to be " * 20)
    with pytest.raises(UserError, match="one.txt's val split would be empty: .*; give it more than one line"):
        run(tmp_path, "--input", str(tmp_path / "one.txt"), "--vocab_size", "259")
    (tmp_path / "two.txt").write_text("to be or not to be\n" + "that is the question " * 10)  # line 2 starts at byte 19
    with pytest.raises(UserError, match=r"two.txt's val split would be empty: .*; give --val_fraction 0.92 or more") as e:
        run(tmp_path, "--input", str(tmp_path / "two.txt"), "--vocab_size", "259")
    fraction = re.search(r"--val_fraction (\S+)", str(e.value)).group(1)
    run(tmp_path, "--input", str(tmp_path / "two.txt"), "--vocab_size", "259", "--val_fraction", fraction)
    meta = json.loads((tmp_path / "data" / "two" / "meta.json").read_text())
    assert meta["splits"]["val"]["bytes"] == 210  # the whole second line


def test_id_dtype():
    assert prepare.id_dtype(65536) == np.uint16 and prepare.id_dtype(65537) == np.uint32
    assert prepare.id_dtype(2 ** 32) == np.uint32


def test_a_package_with_the_wrong_hash_is_refused_before_its_code_runs(tmp_path):
    """A source distribution whose setup.py would leave a marker: pip must refuse it on its hash."""
    marker, package = tmp_path / "ran", tmp_path / "evilpkg-1.0"
    package.mkdir()
    (package / "setup.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                      f"from setuptools import setup\nsetup(name='evilpkg', version='1.0')\n")
    with tarfile.open(tmp_path / "evilpkg-1.0.tar.gz", "w:gz") as tar:
        tar.add(package, arcname="evilpkg-1.0")
    with pytest.raises(RuntimeError, match="Expected sha256 0{64} Got"):
        corpus.read_from_package(f"evilpkg @ file://{tmp_path}/evilpkg-1.0.tar.gz", "0" * 64, "evilpkg-1.0/setup.py")
    assert not marker.exists()


def test_wikitext_is_cleaned_to_prose():
    wiki = ("{{Infobox person|name={{nowrap|Ada}}}}'''Ada Lovelace''' was an [[England|English]] "
            "[[mathematician]].<ref>Toole, p. 1</ref> <!-- a comment -->\n"
            "== Early life ==\n[[File:Ada.jpg|thumb|A [[portrait]]]]\n{| class=\"wikitable\"\n| a || b\n|}\n"
            "* She met [https://example.org Babbage] &amp; others.\n[[Category:1815 births]]\n")
    assert corpus.clean_wikitext(wiki) == "Ada Lovelace was an English mathematician.\nEarly life\n\nShe met Babbage & others.\n"


@pytest.mark.skipif(shutil.which("bible") is None, reason="Debian's bible-kjv is not installed (apt-get install bible-kjv)")
def test_the_bible_is_read_by_book():
    books = corpus.kjv_books()
    assert len(books) == 66 and books[0].startswith("In the beginning God created the heaven and the earth.\n")
    assert books[-1].rstrip().endswith("The grace of our Lord Jesus Christ be with you all. Amen.")


@pytest.mark.parametrize("asked", [512, 300])  # a power of two reserves one id more than the number it suggests
def test_too_large_a_vocabulary_names_one_that_works(tmp_path, asked):
    """issue 54: the suggested --vocab_size once led to a second refusal ('give 288', then 'only 287')."""
    text = tmp_path / "small.txt"
    text.write_text("The crown of the king is gold.\n" * 50)
    argv = ["--input", str(text), "--name", "small", "--out_dir", str(tmp_path / "data"), "--quiet"]
    with pytest.raises(UserError) as error:
        prepare.prepare(prepare.parse_args([*argv, "--vocab_size", str(asked)]))
    suggested = re.search(r"give --vocab_size (\d+), or more text", str(error.value)).group(1)
    meta = prepare.prepare(prepare.parse_args([*argv, "--vocab_size", suggested]))
    assert meta["vocab_size"] == int(suggested)
