"""Four threads on one shared tokenizer, as a classroom server runs them (issue 42's deadlock).

    python -m benchmarks.tokenizer_stress                  # 120 s, the environment a teacher's server has
    python -m benchmarks.tokenizer_stress --seconds 20     # a quick look

One tokenizer, the server's cached default, and four threads that call what the pages call at once:
the Tokenizer page training a vocabulary on a 2 MB upload (``vocab.train_tokenizer``), the Loss page's
NSP encode and the Masking page's encode (``lessons.nsp.encode_pairs``, ``data.encode`` with another
``max_length``), and the Training page's probes (``training_view.usable_probes`` and ``probe_preview``'s
tokenization). A watchdog calls it a stall when no thread finishes a call for ``--stall-s`` seconds, dumps
every thread's stack and exits 1; every exception is an error. Prints one JSON line: calls per thread,
stalls, errors and the environment; a stall that holds the GIL ends the process with exit code 1 and the
stacks on stderr. ``--env app`` (the default) sets what the server sets itself (``ui.settings.SERVER_ENVIRONMENT``); ``--env shell``
keeps this shell's, so ``env -u TOKENIZERS_PARALLELISM ... --env shell`` runs with tokenizers' worker pool on.
Nothing here is a test; ``tests/test_tokenizer_threads.py`` runs it for a few seconds, the slow tier for 120 s.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def upload_text(n_bytes: int) -> list[str]:
    """About ``n_bytes`` of corpus lines, the size of the Tokenizer page's largest upload."""
    from mlm_core.bundled import workshop_sentences

    base = list(workshop_sentences())
    lines, size, k = [], 0, 0
    while size < n_bytes:
        line = f"{base[k % len(base)]} {k}"
        lines.append(line)
        size += len(line) + 1
        k += 1
    return lines


def run(seconds: float, stall_s: float, upload_bytes: int) -> dict:
    import torch

    from mlm_core import data, vocab
    from mlm_core.bundled import load_default_tokenizer, workshop_documents, workshop_sentences
    from mlm_core.lessons import nsp, training_view

    tokenizer = load_default_tokenizer()  # one object, as st.cache_resource hands every session
    sentences = list(workshop_sentences())
    upload = upload_text(upload_bytes)
    pairs = nsp.make_nsp_pairs(workshop_documents(), 32, generator=torch.Generator().manual_seed(0))
    texts = training_view.gazetteer_texts()
    calls = {name: 0 for name in ("train_tokenizer", "nsp_encode", "encode", "usable_probes")}
    errors: list[str] = []
    last_done = [time.monotonic()]
    stop = threading.Event()

    def work(name, fn):
        k = 0
        while not stop.is_set():
            try:
                fn(k)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            calls[name] += 1
            last_done[0] = time.monotonic()
            k += 1

    jobs = {
        "train_tokenizer": lambda k: vocab.train_tokenizer(upload, 2000 + 500 * (k % 3)),
        "nsp_encode": lambda k: nsp.encode_pairs(tokenizer, pairs, max_length=48 + k % 17),
        "encode": lambda k: data.encode(tokenizer, sentences[k % 50: k % 50 + 24], max_length=16 + k % 100),
        "usable_probes": lambda k: training_view.usable_probes(texts, tokenizer),
    }
    threads = [threading.Thread(target=work, args=(name, fn), name=name, daemon=True) for name, fn in jobs.items()]
    started = time.monotonic()
    for t in threads:
        t.start()
    stalled = False
    while time.monotonic() - started < seconds:
        # A thread stuck inside the tokenizer may hold the GIL, and then this loop never runs again: the
        # C-level timer below fires without it, prints every thread's stack and ends the process (exit 1).
        faulthandler.dump_traceback_later(stall_s, exit=True)
        time.sleep(0.5)
        if time.monotonic() - last_done[0] > stall_s:
            stalled = True
            faulthandler.dump_traceback(all_threads=True)
            break
    faulthandler.cancel_dump_traceback_later()
    stop.set()
    if not stalled:
        for t in threads:
            t.join(timeout=stall_s)
        stalled = any(t.is_alive() for t in threads)
    return {"seconds": round(time.monotonic() - started, 1), "calls": calls, "stalls": int(stalled),
            "errors": len(errors), "first_errors": errors[:5],
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--stall-s", type=float, default=30.0, help="no call finished for this long: a stall")
    parser.add_argument("--upload-bytes", type=int, default=2_000_000)
    parser.add_argument("--env", choices=("app", "shell"), default="app",
                        help="app: the environment the server sets itself (ui.settings.SERVER_ENVIRONMENT); "
                             "shell: this shell's as it is (unset TOKENIZERS_PARALLELISM: the Rust pool on)")
    args = parser.parse_args(argv)
    if args.env == "app":
        from ui.settings import SERVER_ENVIRONMENT

        os.environ.update(SERVER_ENVIRONMENT)
    result = run(args.seconds, args.stall_s, args.upload_bytes)
    print(json.dumps(result), flush=True)
    return 1 if result["stalls"] or result["errors"] else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # a stalled thread would keep the interpreter from exiting
