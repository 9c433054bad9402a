"""MLM Lab's library: masking, models, losses and training for masked-language models.

The flow, left to right: text → ``data.encode`` → ``masking.mask_tokens`` → ``models.masked_lm_logits``
→ ``losses`` → ``training.train``. Nothing here imports streamlit.
"""

from mlm_core.errors import InputError, MLMLabError, ModelLoadError
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig, MaskingResult, mask_tokens
from mlm_core.data import Encoded, encode, mask_batch, read_text_upload, special_ids, split_sentences
from mlm_core.bundled import load_default_tokenizer, workshop_documents, workshop_sentences

# --- re-exports of the other modules (each owner adds its lines below) ---
from mlm_core.vocab import (  # vocab (#10)
    TrainedVocab, VocabCache, frequency_profile, head_cost, measure, train_tokenizer, whole_word_demo,
)
