"""The default model's build on a lent GPU (scripts/gpu_build.sh, scripts/gpu_pack.py, docs/gpu_build.md):
``--device``, the pack's layout and stand-in encoder, the export against the package's hashes, the packed
data's fingerprint, and that ``run`` trains the shipped asset's recipe. No GPU, no network, tiny tensors."""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mlm_core import default_model as dm
from mlm_core.models import tiny_random_masked_lm
from scripts import build_default_mlm as build
from scripts import gpu_pack

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_build.sh"
SHIPPED = json.loads((ROOT / "assets" / "default_mlm" / "build.json").read_text())
# The reproduce list of build_record, and the settings of the shipped stage that are not in it.
RECIPE_KEYS = ("steps", "batch", "seq_len", "workshop_frac", "freeze_layers", "warmup", "lr", "head_lr", "masking",
               "seed", "threads", "mix", "emb_lr", "mlm_prob", "init_asset", "bf16", "eval_every", "ckpt_every",
               "anti_copy", "blimp_per_paradigm")


# --------------------------------------------------------------------------- --device
def test_device_is_parsed_and_cuda_without_a_gpu_is_a_usage_error_not_a_traceback(monkeypatch, capsys):
    assert build.parse_args(["--device", "cpu"])[0].device == "cpu"
    assert build.parse_args([])[0].device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert build.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(SystemExit) as e:
        build.parse_args(["--device", "cuda"])
    assert e.value.code == 2  # argparse's usage error
    err = capsys.readouterr().err
    assert "--device cuda: no CUDA GPU is visible" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        build.parse_args(["--device", "tpu"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert build.resolve_device("auto") == torch.device("cuda")


def test_cuda_without_a_gpu_from_the_command_line_prints_one_line_and_exits_2():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "scripts/build_default_mlm.py", "--device", "cuda"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no CUDA GPU is visible" in res.stderr.splitlines()[-1]


def test_a_gpu_pack_needs_the_init_asset_it_was_packed_with(capsys):
    with pytest.raises(SystemExit):
        build.parse_args(["--device", "cpu", "--gpu-pack", "/nonexistent"])
    assert "--init-asset" in capsys.readouterr().err


def test_the_record_names_the_device(tmp_path, tokenizer, monkeypatch):
    from tests.test_build_default_mlm import _run

    _run(tmp_path, tokenizer, monkeypatch, "--steps", "2", "--eval-every", "100", "--device", "cpu")
    record = json.loads((tmp_path / "out" / dm.BUILD_FILE).read_text())
    assert record["machine"]["device"] == "cpu" and "gpu" not in record["machine"]
    assert record["settings"]["device"] == "cpu"


# --------------------------------------------------------------------------- the export against a stand-in
def test_a_stand_in_export_stores_what_differs_from_the_package_not_from_the_stand_in(tmp_path, tokenizer,
                                                                                       monkeypatch):
    package, _ = tiny_random_masked_lm(tokenizer)  # what a user installs
    stand_in = dict(package.state_dict())
    emb, body, same = "bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.output.dense.weight", \
        "bert.encoder.layer.1.output.dense.weight"
    stand_in[emb] = stand_in["cls.predictions.decoder.weight"] = stand_in[emb].half().float()  # carried rounded
    stand_in[body] = stand_in[body] + 1.0  # the init asset's placeholder
    stand_in[same] = stand_in[same] + 1.0

    def base():
        m, _ = tiny_random_masked_lm(tokenizer)
        m.load_state_dict(stand_in)
        return m

    monkeypatch.setattr(dm, "build_untrained", base)
    model = base()
    with torch.no_grad():  # trained: `same` ends where the package has it, `body` stays at the placeholder
        model.get_parameter(same).copy_(package.state_dict()[same])
    tensors = {k: {"sha256": build.tensor_sha256(v), "carried": "fp16" if k == emb else "init_asset"}
               for k, v in package.state_dict().items() if k.startswith("bert.")}
    build.export_asset(model, tmp_path / "a", {}, package=tensors)
    stored = set(load_file(str(tmp_path / "a" / dm.WEIGHTS_FILE)))
    assert body in stored  # equal to the stand-in, not to the package
    assert same not in stored and emb not in stored  # equal to the package / the rounded carried copy
    build.export_asset(model, tmp_path / "b", {})  # without the hashes: against the stand-in, which is wrong here
    assert set(load_file(str(tmp_path / "b" / dm.WEIGHTS_FILE))) != stored


# --------------------------------------------------------------------------- packed data
def test_packed_data_for_other_settings_is_refused_with_what_differs(tmp_path):
    def argv(seed):
        return ["--gpu-pack", str(tmp_path), "--init-asset", "assets/default_mlm", "--seed", seed, "--mix",
                "workshop=1", "--device", "cpu"]

    args, mix = build.parse_args(argv("4"))
    fp = build.data_fingerprint(args, mix, [])
    (tmp_path / build.PACKED_DATA).write_text(json.dumps({"fingerprint": fp, "train": {"workshop": [[1, 2]]},
                                                          "held": [[3]], "stats": {}}))
    assert build.load_sources(args, None, mix, [], tmp_path) == ({"workshop": [[1, 2]]}, [[3]], {})
    other, _ = build.parse_args(argv("5"))
    with pytest.raises(SystemExit, match="seed"):
        build.load_sources(other, None, mix, [], tmp_path)
    with pytest.raises(SystemExit, match="filter_sha1"):  # another evaluation set
        build.load_sources(args, None, mix, [("a [MASK].", ["b"])], tmp_path)


# --------------------------------------------------------------------------- the pack's layout
def test_pack_then_unpack_gives_the_stand_in_encoder_data_and_blimp(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_pack, "XZ_PRESET", 0)
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    (blimp / "p.jsonl").write_text('{"sentence_good": "A.", "sentence_bad": "B."}\n')

    def fake_pack_data(argv, dest, cache):  # the sources' reading is build_default_mlm's (tested there)
        dest.write_text(json.dumps({"fingerprint": {"seed": 4}, "train": {}, "held": [], "stats": {}}))
        return {"seed": 4}

    monkeypatch.setattr(build, "pack_data", fake_pack_data)
    out = tmp_path / ".gpu"
    manifest = gpu_pack.pack(out, ["--init-asset", "assets/default_mlm", "--blimp", str(blimp)], tmp_path / "c")
    assert sorted(p.name for p in out.iterdir()) == sorted(gpu_pack.FILES.values())
    site = out / "site" / gpu_pack.STAND_IN
    assert (site / "model" / "config.json").is_file() and (site / "model" / "vocab.txt").is_file()
    assert not (site / "model" / "model.safetensors").exists()  # 91 MB: assembled there
    assert manifest["bytes"] == gpu_pack.folder_bytes(out) < 40e6
    kinds = {t["carried"] for t in manifest["tensors"].values()}
    assert manifest["tensors"]["bert.embeddings.word_embeddings.weight"]["carried"] == "fp16" and kinds <= {
        "fp16", "init_asset", "exact"}

    work = gpu_pack.unpack(out, tmp_path / "work", ROOT / "assets" / "default_mlm")
    assert (work / build.PACKED_DATA).is_file() and (work / "blimp" / "p.jsonl").is_file()
    stand_in = load_file(str(work / "site" / gpu_pack.STAND_IN / "model" / "model.safetensors"))
    real = load_file(str(dm.encoder_dir() / "model.safetensors"))
    init = load_file(str(ROOT / "assets" / "default_mlm" / dm.WEIGHTS_FILE))
    emb = gpu_pack.WORD_EMBEDDINGS
    assert set(stand_in) == {k for k in real if not k.startswith("pooler.") and not k.endswith("position_ids")}
    assert torch.equal(stand_in[emb], real[emb].half().float())
    layer = "encoder.layer.0.attention.self.query.weight"
    assert torch.equal(stand_in[layer], init["bert." + layer].float())
    assert "GPU_PACK_STAND_IN = True" in (work / "site" / gpu_pack.STAND_IN / "__init__.py").read_text()

    other = tmp_path / "other_asset"  # unpacking with another init asset is refused
    other.mkdir()
    save_file({"x": torch.zeros(1)}, str(other / dm.WEIGHTS_FILE))
    with pytest.raises(SystemExit, match="not the init asset"):
        gpu_pack.unpack(out, tmp_path / "w2", other)


def test_an_import_the_device_lacks_is_found_and_a_function_local_one_is_not(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy\nfrom pandas import Series\n\ndef g():\n    import scipy\n")
    assert gpu_pack._module_level_imports(f) == {"numpy", "pandas"}
    assert gpu_pack.missing_on_device({"numpy", "safetensors", "torch"}) == {}
    assert set(gpu_pack.missing_on_device({"numpy", "pandas"})) == {"pandas"}
    assert gpu_pack.missing_on_device(gpu_pack.build_imports()) == {}  # the build itself needs nothing more


# --------------------------------------------------------------------------- the recipe
def _recipe(**env) -> list[str]:
    out = subprocess.run(["bash", str(SCRIPT), "recipe"], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout
    return out.splitlines()


def test_the_run_recipe_is_the_shipped_assets_with_a_gpu_batch():
    args, _ = build.parse_args(_recipe())
    settings = SHIPPED["settings"]
    differ = {k for k in RECIPE_KEYS if getattr(args, k) != settings[k]}
    # The GPU run keeps the shipped data, rates, masking and precision; its schedule is its own (batch 128 for
    # 1,500 steps, a fresh seed so its batches are new, its evaluation pace): those may differ from a CPU stage's.
    schedule = {"batch", "init_asset", "steps", "seed", "eval_every"}
    assert differ <= schedule, differ
    assert args.batch == 128 and args.init_asset == "assets/default_mlm"
    # the record's own reproduce line says the same
    line = SHIPPED["reproduce"].split("  (")[0].split(" ", 2)[2]
    shipped, _ = build.parse_args(shlex.split(line))
    assert {k for k in RECIPE_KEYS if getattr(args, k) != getattr(shipped, k)} <= schedule | {"ckpt_every"}
    assert build.parse_args(_recipe(BATCH="64"))[0].batch == 64
    assert (args.output_lr, args.ema) == (0.0, 0.0)  # the shipped recipe: tied, no average
    tried = build.parse_args(_recipe(OUTPUT_LR="2e-5", EMA="0.998"))[0]
    assert (tried.output_lr, tried.ema) == (2e-5, 0.998)


def test_run_passes_the_recipe_the_device_and_the_pack_to_the_build(tmp_path):
    argv_file, work = tmp_path / "argv", tmp_path / "work"
    fake = tmp_path / "python"
    fake.write_text(f"""#!/bin/bash
case "$1" in
  scripts/build_default_mlm.py) shift; printf '%s\\n' "$@" > {argv_file}; mkdir -p {work}/ckpt;
    echo '{{"event": "train", "step": 4, "loss": 1.0}}' > {work}/ckpt/log.jsonl; printf '{{"event": "ev' >> {work}/ckpt/log.jsonl
    mkdir -p {tmp_path}/out/asset; echo '{{}}' > {tmp_path}/out/asset/build.json
    head -c 23000000 /dev/urandom > {tmp_path}/out/asset/model.safetensors; exit 0;;
  scripts/gpu_pack.py) exit 0;;
esac
exec {shlex.quote(sys.executable)} "$@"
""")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"), "WORK": str(work), "CALL_S": "540"}
    res = subprocess.run(["bash", str(SCRIPT), "run"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    got = argv_file.read_text().splitlines()
    recipe = _recipe(CKPT_EVERY="500")  # run's checkpoints stay there: fewer of them
    assert got[:len(recipe)] == recipe
    rest = dict(zip(got[len(recipe)::2], got[len(recipe) + 1::2]))
    assert rest["--device"] == "cuda" and rest["--gpu-pack"] == str(work) and rest["--blimp"] == f"{work}/blimp"
    assert rest["--out"] == str(tmp_path / "out" / "asset")
    assert 0 < float(rest["--minutes"]) <= (540 - 60 - 90) / 60
    assert (tmp_path / "out" / "log.jsonl").is_file() and '"steps": 4' in res.stdout  # the summary, past a cut line
    # the run tool returns at most 8 files of at most 16 MiB each: the 23 MB weights come back in parts
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert len(files) <= 8 and max(p.stat().st_size for p in files) < 16 * 2**20, files
    asset = tmp_path / "out" / "asset"
    parts = sorted(asset.glob("model.safetensors.part*"))
    assert len(parts) == 2 and not (asset / "model.safetensors").exists()
    joined = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    assert (asset / "model.safetensors.sha256").read_text().split()[0] == joined
    shutil.rmtree(work)
