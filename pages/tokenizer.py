"""Tokenizer: how the size of the subword vocabulary shapes masking, the head's cost and the loss."""

import pandas as pd
import streamlit as st

import ui
from ui import share_state
from mlm_core.bundled import workshop_sentences
from mlm_core.data import clean_text, read_text_upload, split_sentences
from mlm_core.errors import MLMLabError
from mlm_core.costs import head_cost
from mlm_core.figures.vocab import frequency_profile_figure, head_cost_figure, split_metrics_figure
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons.vocab import (PageVocab, frequency_profile, size_label, supported_note, vocab_table,
                                    whole_word_demo)
from mlm_core.vocab import (
    ALGORITHM_LABELS,
    MAX_VOCAB_SIZE,
    cut_differences,
    corpus_hash,
    holdout_split,
    measure,
    most_split_word,
    reachable_sizes,
    sentence_words,
    tokenize_words,
)

CACHE_KEY = "tokenizer_vocab_cache"  # this page's VocabCache: vocabularies trained in this session
STATS_KEY = "tokenizer_stats_cache"  # metrics and frequency profiles already computed in this session

BERT = "bert-base-uncased"
ALL = "all"  # the largest vocabulary the corpus supports
DEFAULT_SIZES = ["500", "1k", "2k", ALL, BERT]
MAX_SIZES = 6
MAX_UPLOAD_BYTES = 2_000_000
MAX_SENTENCE_CHARS = 1_000
DEFAULT_SENTENCE = "Tokenization splits unbelievably uncommon words into several pieces."
HIDDEN_SIZES = {"tiny (H = 64)": 64, "MiniLM (H = 384)": 384, "bert-base (H = 768)": 768}

TEXT = LessonText("tokenizer")  # mlm_core/lessons/text/tokenizer.md
settings = ui.page_setup("🧩 Tokenizer: what the vocabulary size changes", link=share_state.PAGE_LINKS["tokenizer"])
st.markdown(TEXT("intro"))


def corpus_controls() -> tuple[list[str], str] | None:
    """The sentences to train on and a short name for them, or None (with a message) when unusable."""
    source = st.radio(
        "Corpus", ["workshop", "paste", "upload"], horizontal=True, key="tokenizer_source",
        format_func={"workshop": "Workshop corpus (bundled)", "paste": "Paste text", "upload": "Upload a file"}.get,
    )
    try:
        if source == "workshop":
            sentences = workshop_sentences()
            name = "the workshop corpus"
        elif source == "paste":
            text = st.text_area("Paste some text (one or more paragraphs)", key="tokenizer_paste", height=150)
            if not text.strip():
                st.info("Paste some text to train a vocabulary on it.")
                return None
            sentences = split_sentences(clean_text(text, what="The pasted text"))
            name = "your text"
        else:
            upload = st.file_uploader("A .txt, .csv or .jsonl file", type=["txt", "csv", "jsonl"],
                                      key="tokenizer_upload")
            if upload is None:
                st.info("Upload a text file to train a vocabulary on it.")
                return None
            sentences = split_sentences(read_text_upload(upload.name, upload.getvalue(), max_bytes=MAX_UPLOAD_BYTES))
            name = upload.name
    except MLMLabError as exc:
        ui.show_error(exc, "warning")
        return None
    if not sentences:
        st.warning("There are no sentences in this text.")
        return None
    return sentences, name


def algorithm_control() -> list[str]:
    algorithm = st.radio("Algorithm", ["wordpiece", "bpe", "both"], horizontal=True, key="tokenizer_algorithm",
                         format_func=lambda a: ALGORITHM_LABELS.get(a, "Both"),
                         help=TEXT("algorithm_help"))
    return ["wordpiece", "bpe"] if algorithm == "both" else [algorithm]


def largest_vocabularies(train_texts, algorithms) -> dict[str, int]:
    """Per algorithm, the size the corpus supports (a training run asked for MAX_VOCAB_SIZE), cached."""
    cache = ui.vocab_cache(CACHE_KEY)
    texts_hash = corpus_hash(train_texts)
    todo = [a for a in algorithms if cache.get(a, MAX_VOCAB_SIZE, texts_hash) is None]
    if todo:
        with st.spinner("Finding the largest vocabulary this corpus supports…"):
            ui.heavy_click(lambda: [cache.get_or_train(train_texts, MAX_VOCAB_SIZE, algorithm, texts_hash=texts_hash)
                                    for algorithm in todo])
    return {a: cache.get_or_train(train_texts, MAX_VOCAB_SIZE, a, texts_hash=texts_hash).vocab_size
            for a in algorithms}


def size_controls(largest: int) -> dict[str, int | None]:
    """{label: size} picked by the learner, offered only up to what the corpus supports."""
    options = {size_label(v): v for v in reachable_sizes(largest)}
    options[ALL] = MAX_VOCAB_SIZE
    options[BERT] = None
    state = st.session_state
    if "tokenizer_sizes" in state:  # a size another corpus offered may not be offered for this one
        state["tokenizer_sizes"] = [v for v in state["tokenizer_sizes"] if v in options]
    picked = st.multiselect(f"Vocabulary sizes (2 to {MAX_SIZES})", list(options),
                            default=[v for v in DEFAULT_SIZES if v in options], max_selections=MAX_SIZES,
                            key="tokenizer_sizes", format_func=lambda v: f"all it supports ({largest:,})" if v == ALL else v,
                            help=f"{BERT} is the bundled 30,522-entry vocabulary, trained on Wikipedia and books.")
    return {label: options[label] for label in picked}


def train_vocabularies(train_texts, algorithms, sizes: list[int]) -> list:
    """Cached or newly trained vocabularies, with a progress bar while training."""
    cache = ui.vocab_cache(CACHE_KEY)
    texts_hash = corpus_hash(train_texts)
    wanted = [(a, v) for a in algorithms for v in sorted(sizes)]
    todo = [(a, v) for a, v in wanted if cache.get(a, v, texts_hash) is None]
    if todo:
        with st.status(f"Training vocabularies on {len(train_texts):,} sentences…", expanded=True) as status:
            bar = st.progress(0.0)

            def train_all():
                for done, (algorithm, size) in enumerate(todo):
                    def report(fraction, message, done=done, algorithm=algorithm, size=size):
                        bar.progress(min(1.0, (done + fraction) / len(todo)),
                                     text=f"{ALGORITHM_LABELS[algorithm]} {size:,}: {message}")
                    trained = cache.get_or_train(train_texts, size, algorithm, texts_hash=texts_hash,
                                                 on_progress=report)
                    st.write(f"{trained.label} trained in {trained.seconds:.1f} s")
            ui.heavy_click(train_all)
            status.update(label="Vocabularies ready", state="complete", expanded=False)
    return [cache.get_or_train(train_texts, v, a, texts_hash=texts_hash) for a, v in wanted]


corpus = corpus_controls()
if corpus is None:
    st.stop()
sentences, corpus_name = corpus
shown_corpus = ui.markdown_text(corpus_name)  # an upload's file name is the learner's text: shown as text
algorithms = algorithm_control()
train_texts, test_texts = holdout_split(sentences)
try:
    largest = largest_vocabularies(train_texts, algorithms)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()
st.info(supported_note(ui.markdown_text(corpus_name[:1].upper() + corpus_name[1:]), len(train_texts), largest))
picked_sizes = size_controls(min(largest.values()))
if len(picked_sizes) < 2:
    st.warning("Pick at least two vocabulary sizes to compare.")
    st.stop()
try:
    trained = train_vocabularies(train_texts, algorithms, [v for v in picked_sizes.values() if v is not None])
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()

# Every vocabulary on the page: (family, label, tokenizer, trained-or-None, cache key).
vocabs = [PageVocab(ALGORITHM_LABELS[t.algorithm], f"{t.label} (all)" if t.saturated else t.label, t.tokenizer, t,
                    (t.algorithm, t.vocab_size, corpus_hash(train_texts))) for t in trained]
if BERT in picked_sizes:
    vocabs.append(PageVocab(BERT, f"{BERT} 30,522", ui.cached_tokenizer(None), None, (BERT,)))
stats_cache = st.session_state.setdefault(STATS_KEY, {})
if len(stats_cache) > 64:
    stats_cache.clear()


def cached_stats(kind: str, key: tuple, texts: list[str], compute):
    """measure / frequency_profile of a vocabulary on a text, computed once per session."""
    full_key = (kind, key, corpus_hash(texts))
    if full_key not in stats_cache:
        stats_cache[full_key] = compute()
    return stats_cache[full_key]


if test_texts is train_texts:
    st.caption(f"{shown_corpus}: {len(sentences):,} sentences, too few to hold some out, so the numbers below "
               "are measured on the training text itself.")
else:
    st.caption(f"Trained on {len(train_texts):,} sentences of {shown_corpus}; measured on the other "
               f"{len(test_texts):,} (every 10th sentence, never seen in training).")
# --- 1. One sentence, every vocabulary ---------------------------------------------------------
st.subheader("One sentence, cut by each vocabulary")
st.session_state.setdefault("tokenizer_sentence", st.session_state.get(ui.KEYS.sentence) or DEFAULT_SENTENCE)
sentence = st.text_input("Sentence", key="tokenizer_sentence", help="Try rare or made-up words.")
sentence = sentence.strip()[:MAX_SENTENCE_CHARS]
if not sentence:
    st.warning("Type a sentence to see how each vocabulary cuts it.")
    st.stop()
for family, label, tokenizer, _, _ in vocabs:
    words = tokenize_words(tokenizer, sentence)
    pieces = [p for w in words for p in w]
    st.markdown(f"**{label}** — {len(pieces)} tokens for {len(words)} words and punctuation marks")
    ui.token_chips(pieces, titles=[str(i) for i in tokenizer.convert_tokens_to_ids(pieces)])
st.markdown(TEXT("notation"))
by_size: dict[int, dict[str, object]] = {}
for family, label, tokenizer, t, _ in vocabs:
    if t is not None:
        by_size.setdefault(t.requested_size, {})[t.algorithm] = (label, tokenizer)
pairs = [(size, found) for size, found in sorted(by_size.items()) if len(found) == 2]
if pairs:
    size, found = pairs[0]
    (wp_label, wp), (bpe_label, bpe) = found["wordpiece"], found["bpe"]
    differences = cut_differences(wp, bpe, sentence)
    if differences:
        st.markdown(f"With the marks set aside, **{wp_label}** and **{bpe_label}** cut {len(differences)} of "
                    f"{len(tokenize_words(wp, sentence))} words of this sentence differently:")
        ui.table(pd.DataFrame([{"word": w, wp_label: " ".join(a), bpe_label: " ".join(b)}
                                   for w, a, b in differences]))
    else:
        st.caption(f"With the marks set aside, {wp_label} and {bpe_label} cut every word of this sentence the same way.")

# --- 2. Metrics against vocabulary size --------------------------------------------------------
st.subheader("Pieces per word, split words and [UNK] against vocabulary size")
rows = []
for family, label, tokenizer, t, key in vocabs:
    m = cached_stats("measure", key, test_texts, lambda: measure(tokenizer, test_texts))
    rows.append({"family": family, "label": label, **m.as_dict()})
height = 520 if settings.presenter else 380
ui.chart(split_metrics_figure(rows, height=height), "tokenizer_split_fig", name="tokenizer_split_words")

st.subheader("What V costs the MLM head, and where the loss starts")
with st.expander("Head-cost assumptions", expanded=False):
    c1, c2, c3 = st.columns(3)
    hidden = HIDDEN_SIZES[c1.selectbox("Hidden size", list(HIDDEN_SIZES), index=2, key="tokenizer_hidden")]
    batch = int(c2.number_input("Batch size B", 1, 1024, 32, key="tokenizer_batch"))
    seq_len = int(c3.number_input("Sequence length T", 8, 512, 128, key="tokenizer_seq_len"))
costs = [(family, label, head_cost(len(tokenizer), hidden_size=hidden, batch_size=batch, seq_len=seq_len))
         for family, label, tokenizer, _, _ in vocabs]
ui.chart(head_cost_figure(costs, height=height + 20), "tokenizer_cost_fig", name="tokenizer_head_cost")
st.caption(TEXT("head_cost"))
# HTML, its headers wrap: at 1400 px the dataframe cut "logits M…" at the right edge
ui.table(pd.DataFrame(vocab_table(rows, [c for _, _, c in costs])), static=True)

st.subheader("Frequency profile: how often each entry is used")
profiles = [
    (family, label, cached_stats("profile", key, sentences, lambda: frequency_profile(tokenizer, sentences)))
    for family, label, tokenizer, _, key in vocabs
]
ui.chart(frequency_profile_figure(profiles, height=height + 40), "tokenizer_freq_fig", name="tokenizer_frequency_profile")
st.caption(f"Counted over all of {shown_corpus}. The head scores every entry at every masked position, "
           "including the ones this text never uses.")

# --- 3. Whole-word vs token masking ------------------------------------------------------------
st.subheader("Whole-word vs token masking on a word cut into many pieces")
labels = [v.label for v in vocabs]
c1, c2 = st.columns(2)
chosen = c1.selectbox("Vocabulary", labels, index=0, key="tokenizer_demo_vocab")
tokenizer = vocabs[labels.index(chosen)].tokenizer
default_word = most_split_word(tokenizer, sentence)
word_choices = list(dict.fromkeys(sentence_words(tokenizer, sentence)))
word = c2.selectbox("Word to watch", word_choices,
                    index=word_choices.index(default_word) if default_word in word_choices else 0,
                    key=f"tokenizer_demo_word_{corpus_hash([chosen, sentence])}",
                    help="By default, the word this vocabulary cuts into the most pieces.")
try:
    demo = whole_word_demo(tokenizer, sentence, word, seed=settings.seed)
except MLMLabError as exc:
    ui.show_error(exc, "warning")
    demo = None
if demo is not None:
    n_pieces = len(demo.word_positions)
    shown_word = ui.markdown_text(demo.word)  # a word of the learner's sentence: shown as text
    if n_pieces < 2:
        st.info(f"'{shown_word}' is a single token in {chosen}: both strategies treat it the same. "
                "Pick a smaller vocabulary or a rarer word.")
    ui.decision_legend()
    for strategy, title in (("token", "Token masking (BERT's original)"), ("whole_word", "Whole-word masking")):
        example = demo.examples[strategy]
        originals = [o if o != t else None for t, o in zip(example.tokens, example.originals)]
        st.markdown(f"**{title}** — draw {example.draw + 1} of {demo.n_draws}: {example.word_hidden} of the "
                    f"{n_pieces} pieces of '{shown_word}' selected")
        ui.token_chips(example.tokens, example.decisions, originals)
    c1, c2 = st.columns(2)
    c1.metric("token masking: word only partly hidden", f"{demo.partial_share['token']:.0%}",
              help="Of the draws that selected any piece of the word.")
    c2.metric("whole-word masking: word only partly hidden", f"{demo.partial_share['whole_word']:.0%}")
    st.caption(TEXT("whole_word", word=shown_word, pieces=n_pieces, plural="s" if n_pieces != 1 else "",
                    vocab=chosen, draws=demo.n_draws, seed=settings.seed, hit=demo.hit_share["token"]))

# --- 4. Hand over to the Training page ---------------------------------------------------------
st.subheader("Train a model with one of these vocabularies")
trainable = [v.trained for v in vocabs if v.trained is not None]
if trainable:
    names = [v.label for v in vocabs if v.trained is not None]
    c1, c2 = st.columns([2, 1])
    pick = c1.selectbox("Vocabulary for the tiny from-scratch model", names, key="tokenizer_handover")
    if c2.button("Use with the Training page", key="tokenizer_use", width="stretch"):
        st.session_state[ui.KEYS.trained_tokenizer] = trainable[names.index(pick)]
    current = st.session_state.get(ui.KEYS.trained_tokenizer)
    if current is not None:
        st.success(TEXT("handover", label=current.label, sentences=current.n_sentences))
