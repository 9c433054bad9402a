"""Does a text look English? A rough check for one note: the bundled models know English only.

The bundled default was trained on English text with bert-base-uncased's English WordPiece
vocabulary (``mlm_core.default_model``), and tiny-random shares that vocabulary; BERT, DistilBERT,
RoBERTa and ALBERT base were pre-trained on English text (BERT: BooksCorpus and English Wikipedia,
Devlin et al. 2019, §3.1). On a French or Russian sentence they still answer, with English words.
``language_note`` says so before a learner wonders why.

The check is deliberately simple (no language-identification model): a text is not English when most
of its letters are outside the Latin alphabet, or when its everyday function words are another
language's rather than English's. It errs towards silence: a sentence it is unsure of gets no note.

>>> language_hint("The cat sat on the mat.") is None
True
>>> language_hint("Le chat est assis sur le tapis et regarde les oiseaux.")
'French'
>>> language_hint("Кошка сидит на ковре.")
'Cyrillic script'
"""

from __future__ import annotations

import re
import unicodedata

# Models that learned English only: None is the bundled default. Others may be English too; these are known.
ENGLISH_ONLY = frozenset({None, "default", "tiny-random", "bert-base-uncased", "bert-base-cased",
                          "bert-large-uncased", "bert-large-cased", "distilbert-base-uncased",
                          "distilbert-base-cased", "roberta-base", "roberta-large", "distilroberta-base",
                          "albert-base-v2"})

# Each language's commonest function words (articles, prepositions, pronouns, conjunctions) that are not
# also common English words ("a", "in", "die", "de" ... are left out where English uses them too).
FUNCTION_WORDS = {
    "English": "the and of to is that it for was with as on are this be at by from have not you they his her "
               "which or we an were but has had their been would there will can what when who all into".split(),
    "French": "le la les des du une et est dans pour que qui sur pas avec sont au aux ce cette il elle nous "
              "vous ils ne mais ou très son ses leur".split(),
    "German": "der das und ist nicht ein eine zu den von mit sich auf für dem des im sie wir ich auch auf "
              "aus wird nach bei oder sind wie".split(),
    "Spanish": "el la los las del una y es en que por para con se su al lo como más pero sus muy está "
               "son yo".split(),
    "Italian": "il lo la gli le del della una e è di che per con non sono nel alla più si anche ma come".split(),
    "Portuguese": "o os as da do das dos uma e é em que para com não se por mais como seu sua mas são".split(),
    "Dutch": "de het een en van is dat niet op te zijn met voor er aan ook als bij maar wordt ik".split(),
}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ")[0] if name else "UNKNOWN"


def language_hint(text: str) -> str | None:
    """What the text looks like when it does not look English ("French", "Cyrillic script"), else None."""
    letters = [c for c in str(text) if c.isalpha()]
    if not letters:
        return None
    scripts: dict[str, int] = {}
    for c in letters:
        scripts[_script(c)] = scripts.get(_script(c), 0) + 1
    others = {name: n for name, n in scripts.items() if name != "LATIN"}
    if sum(others.values()) > len(letters) / 2:  # mostly another alphabet (Japanese mixes three)
        script = max(others.items(), key=lambda kv: kv[1])[0]
        return f"{script if script == 'CJK' else script.capitalize()} script"
    words = [w.lower() for w in _WORD.findall(str(text))]
    hits = {lang: sum(w in set(vocab) for w in words) for lang, vocab in FUNCTION_WORDS.items()}
    other, best = max(((lang, n) for lang, n in hits.items() if lang != "English"), key=lambda kv: kv[1])
    if best >= 2 and best > 2 * hits["English"]:
        return other
    return None


def language_note(text: str, model_name: str | None, label: str | None = None) -> str | None:
    """A sentence for the page when ``text`` does not look English and the model knows English only, else None.

    >>> language_note("Der Hund schläft und die Katze spielt.", None, "the bundled default")[:75]
    'This text looks like German. The model in use learned English only (it is t'
    >>> language_note("Der Hund schläft und die Katze spielt.", "xlm-roberta-base") is None
    True
    """
    if model_name not in ENGLISH_ONLY:
        return None
    hint = language_hint(text)
    if hint is None:
        return None
    what = f"like {hint}" if not hint.endswith("script") else f"like text in the {hint}"
    which = f" (it is {label})" if label else ""
    return (f"This text looks {what}. The model in use learned English only{which}: it still guesses, but with "
            "English words and word pieces. For other languages, pick a multilingual model in the sidebar (such as "
            "bert-base-multilingual-cased or xlm-roberta-base, where this server offers one).")
